"""A local ``redis-server`` the project starts itself (tests, ``make dev``): 127.0.0.1 only, AOF persistence.

Production points ``REDIS_URL`` at its own server; this is for a machine with nothing but the Debian
package. The append-only file is fsynced every second by default (``appendfsync everysec``); a test that
kills the server and restarts it from the AOF passes ``fsync="always"``, so every acknowledged write is on
disk before the server answers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class RedisServerMissing(RuntimeError):
    """``redis-server`` is not installed (``make`` installs Debian's package where it can)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """One ``redis-server`` process with its data (AOF) in ``data_dir``."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    fsync: str = "everysec"
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerMissing("redis-server is not installed: `make` installs it (apt-get install "
                                     "redis-server), or set REDIS_URL to a running server")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [executable, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
                "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "", "--protected-mode", "yes",
                "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log"),
                "--pidfile", str(self.data_dir / "redis.pid")]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{self.port} within {timeout:.0f} s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server dies with whatever it had not written to its AOF."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def local_redis_dir() -> Path:
    from ingestion_pipeline.core.settings import data_dir

    return data_dir() / "redis"


def start_local_redis(port: int = 6379) -> str | None:
    """The project's own redis-server for `make dev` (``.data/redis``, AOF on, 127.0.0.1:``port``), left
    running like the embedded Postgres; its URL, or None when something already answers on the port."""
    server = RedisServer(local_redis_dir(), port=port)
    if server.ping():
        return None
    server.start()
    return server.url


def stop_local_redis() -> int | None:
    """End the project's own redis-server by the PID in its pidfile; the PID, or None if none was running."""
    pidfile = local_redis_dir() / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return None
    return pid
