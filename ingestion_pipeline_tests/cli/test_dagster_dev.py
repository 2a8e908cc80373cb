"""`make dev` for real: `ingestion-pipeline dev` (webserver + daemon) picks up a queued upload through
upload_sensor, runs the batch and finalizes the ledger, with no `process` call."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ingestion_pipeline.core.settings import project_root
from ingestion_pipeline_tests.helpers import submit, table


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop the process group we started (dagster dev, its daemon, code server and run workers)."""
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.timeout(600)
def test_dev_daemon_ingests_a_queued_upload(database, project_dagster_home, db, corpus_dir, tmp_path):
    [queued] = submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    [bad] = submit(database, "acme", corpus_dir / "broken" / "password.pdf")
    port = _free_port()
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen(
        ["env", "--default-signal=INT", str(Path(sys.executable).parent / "ingestion-pipeline"), "dev",
         "--port", str(port)],
        cwd=project_root(), env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 420
        statuses: dict = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-4000:]
            rows = table(db, "SELECT run_id, status, error, dagster_run_id FROM ingestion_runs ORDER BY run_id")
            statuses = {r["run_id"]: r for r in rows}
            if all(r["status"] in ("succeeded", "failed") for r in rows):
                break
            time.sleep(3)
        assert statuses[queued.run_id]["status"] == "succeeded", (tmp_path / "dev.log").read_text()[-4000:]
        assert statuses[bad.run_id]["status"] == "failed"
        assert statuses[bad.run_id]["error"].startswith("PDF is password-protected")
        assert statuses[queued.run_id]["dagster_run_id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as response:
            assert response.status == 200
    finally:
        _stop(proc)
        log.close()
