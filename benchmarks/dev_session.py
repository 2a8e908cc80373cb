"""``ingestion-pipeline dev`` on a throwaway data folder, for the benchmarks that time it (dev_latency.py,
queue_intake.py --dev): started, and everything it and the benchmark started ended in ``finally``.

``dev`` starts the project's redis-server when ``REDIS_URL`` is unset, and that server outlives it by design
(as the embedded Postgres does); a session therefore always sets ``REDIS_URL``: to its own server, which it
stops, or to ``none``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ingestion_pipeline.core.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ingestion-pipeline")


@dataclass
class DevSession:
    work: Path
    env: dict[str, str]
    url: str  # the embedded Postgres
    process: subprocess.Popen
    api_url: str | None = None  # the HTTP API `dev` started (development mode: ?tenant_id=)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise SystemExit(f"dev stopped:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return (self.work / "dev.log").read_text()[-3000:]


@contextlib.contextmanager
def dev_session(prefix: str, *, redis: bool = False, api: bool = True,
                before_dev: Callable[[dict[str, str], Path], None] | None = None) -> Iterator[DevSession]:
    """``redis``: a redis-server of the session's own (its URL in ``env["REDIS_URL"]``), else ``none``;
    ``before_dev(env, work)`` runs once the database is migrated, before ``dev`` starts."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    server = dev = log = None
    env: dict[str, str] = {}
    try:
        if redis:
            server = RedisServer(work / "redis").start()
        (work / "dagster_home").mkdir()
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL")}
        env.update(INGESTION_DATA_DIR=str(work / "data"), DAGSTER_HOME=str(work / "dagster_home"),
                   REDIS_URL=server.url if server else "none")
        url = subprocess.run([CLI, "db", "url"], env=env, check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run([CLI, "db", "migrate"], env=env, check=True, capture_output=True)
        env["DATABASE_URL"] = url
        if before_dev:
            before_dev(env, work)
        log = (work / "dev.log").open("w")
        api_port = free_port() if api else 0
        dev = subprocess.Popen([CLI, "dev", "--port", str(free_port()), "--api-port", str(api_port)],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        yield DevSession(work, env, url, dev, f"http://127.0.0.1:{api_port}" if api else None)
    finally:
        if dev is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dev.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                dev.wait(30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dev.pid, signal.SIGKILL)
        if log is not None:
            log.close()
        if "INGESTION_DATA_DIR" in env:
            subprocess.run([CLI, "db", "stop"], env=env, capture_output=True)
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
