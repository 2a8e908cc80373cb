"""`ingestion-pipeline code-server|daemon|webserver`: Dagster's own executables behind the CLI's database check.

Laid out as docker-compose.yml runs them (three processes; the daemon and the webserver reach the code server
over gRPC through a workspace file), they ingest a queued upload; with a database that is not there they exit 3
before Dagster starts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ingestion_pipeline.core.redis_server import free_port
from ingestion_pipeline_tests.cli.test_corpus_cli import CLI
from ingestion_pipeline_tests.helpers import answers, stop_process_group, submit, table


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(CLI + args, env=os.environ.copy(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait(condition, what: str, procs: dict[str, tuple[subprocess.Popen, Path]], timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, (proc, log) in procs.items():
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(
        f"--- {name}\n{log.read_text()[-2000:]}" for name, (_, log) in procs.items()))


def _executable(pid: int) -> str:
    """What the process runs now: after exec, Dagster's script under the same PID."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_three_dagster_services_ingest_a_queued_upload(database, project_dagster_home, db, corpus_dir,
                                                           isolated_storage, tmp_path):
    [queued] = submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    grpc_port, ui_port = free_port(), free_port()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {grpc_port}\n"
                         "      location_name: ingestion_pipeline\n")
    procs: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        log = tmp_path / "code-server.log"
        procs["code-server"] = _start(["code-server", "--port", str(grpc_port)], log), log
        health = [str(Path(CLI[0]).parent / "dagster"), "api", "grpc-health-check", "-p", str(grpc_port)]
        _wait(lambda: subprocess.run(health, capture_output=True).returncode == 0, "the code server", procs)
        for name, args in (("daemon", ["daemon", "-w", str(workspace)]),
                           ("webserver", ["webserver", "--port", str(ui_port), "-w", str(workspace)])):
            log = tmp_path / f"{name}.log"
            procs[name] = _start(args, log), log
        for name, script in (("code-server", "dagster code-server start"), ("daemon", "dagster-daemon run"),
                             ("webserver", "dagster-webserver")):
            proc, log = procs[name]
            _wait(lambda proc=proc, script=script: script in _executable(proc.pid), f"{name} exec", procs, 60)
            assert "the databases answer" in log.read_text(), name
        _wait(lambda: answers(f"http://127.0.0.1:{ui_port}/server_info"), "the webserver", procs)
        # the daemon's upload sensor launches the batch through the code server; the run finalizes the ledger
        row = _wait(lambda: next((r for r in table(db, "SELECT status, dagster_run_id FROM ingestion_runs "
                                                       "WHERE file_id = %s", queued.file_id)
                                  if r["status"] in ("succeeded", "failed")), None), "the upload's run", procs)
        assert row["status"] == "succeeded" and row["dagster_run_id"]
    finally:
        for proc, _ in procs.values():
            stop_process_group(proc, signal.SIGTERM)


UNREACHABLE_STORAGE = f"postgresql+psycopg2://ingestion:secret@127.0.0.1:{free_port()}/dagster?connect_timeout=3"


@pytest.mark.parametrize("command", [["code-server", "--port", "0"], ["daemon"], ["webserver", "--port", "0"]],
                         ids=" ".join)
def test_dagster_storage_that_is_not_there_is_exit_code_3(command, database_url, isolated_storage, tmp_path):
    """The application database answers, Dagster's storage does not: exit 3 naming DAGSTER_PG_URL."""
    result = subprocess.run(CLI + command, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "DAGSTER_PG_URL": UNREACHABLE_STORAGE,
                                 "DAGSTER_HOME": str(tmp_path)})
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])
    assert "the database is unavailable (Dagster's storage (DAGSTER_PG_URL) does not answer" in result.stderr
    assert "Traceback" not in result.stderr
