"""Hosts that share nothing but a network: Linux network namespaces on one bridge (needs root).

Each host is a namespace with one veth and one address on ``10.<a>.<b>.0/24``; the bridge's end of its
veth stays in the root namespace, so ``link(host, up=False)`` takes the host off the network as a pulled
cable would. Processes start with ``ip netns exec``, each with its own data folder; what a host's processes
used (CPU seconds) is read from /proc for the PIDs ``ip netns pids`` names. ``close`` ends every process it
started, by PID, and removes the namespaces and the bridge.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pgserver
import psycopg
from pgserver.utils import ensure_user_exists

TICKS = os.sysconf("SC_CLK_TCK")
PG_BIN = Path(pgserver.__file__).parent / "pginstall" / "bin"
PG_PASSWORD = "hosts-share-nothing"
PG_USER = "pgserver"  # the system user pgserver itself runs Postgres as when it is started by root


def usable() -> bool:
    """Namespaces need root, iproute2 and runuser (Postgres runs as an unprivileged user)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("runuser") is not None


def wait_for(check, what: str, timeout: float = 120.0, every: float = 0.5):
    """``check()``'s first truthy value; errors count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:  # noqa: BLE001 - not there yet
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    veth: str  # the bridge's end, in the root namespace
    processes: list[subprocess.Popen] = field(default_factory=list)

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def cpu_seconds(self) -> float:
        """CPU of every process in the namespace now, with the children each has reaped."""
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(f) for f in fields[11:15]) / TICKS
        return total


class Network:
    def __init__(self) -> None:
        self.tag = f"ip{random.randrange(16**4):04x}"
        self.subnet = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
        self.bridge = f"{self.tag}br"
        self.gateway = f"{self.subnet}.1"  # the root namespace's address on the bridge (the test reaches hosts)
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        index = len(self.hosts) + 2
        host = Host(name, f"{self.tag}-{name}", f"{self.subnet}.{index}", f"{self.tag}v{index}")
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        for args in (("addr", "add", f"{host.address}/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                     ("link", "set", "lo", "up")):
            _ip("netns", "exec", host.namespace, "ip", *args)
        self.hosts[name] = host
        return host

    def start(self, host: Host, argv: list[str], env: dict[str, str], log: Path,
              user: str | None = None) -> subprocess.Popen:
        prefix = ["ip", "netns", "exec", host.namespace] + (["runuser", "-u", user, "--"] if user else [])
        proc = subprocess.Popen(prefix + argv, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        host.processes.append(proc)
        return proc

    def run(self, host: Host, argv: list[str], env: dict[str, str], timeout: float = 300,
            user: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
        prefix = ["ip", "netns", "exec", host.namespace] + (["runuser", "-u", user, "--"] if user else [])
        return subprocess.run(prefix + argv, env=env, capture_output=True, text=True, timeout=timeout, input=stdin)

    def add_hosts(self, names: tuple[str, ...], root: Path) -> tuple[dict[str, Host], dict[str, Path]]:
        """The hosts, each with a folder of its own under ``root`` (world-readable: Postgres runs unprivileged)."""
        hosts = {name: self.add(name) for name in names}
        folders = {name: root / name for name in names}
        for folder in folders.values():
            folder.mkdir()
            os.chmod(folder, 0o755)
        return hosts, folders

    def start_s3(self, host: Host, folder: Path) -> str:
        """moto's server on the host's address; its URL (requests are logged to ``folder/moto.log``)."""
        moto = Path(sys.executable).parent / "moto_server"  # this environment's
        self.start(host, [str(moto), "-H", host.address, "-p", "5000"], env=dict(os.environ), log=folder / "moto.log")
        return f"http://{host.address}:5000"

    def start_redis(self, host: Host, folder: Path) -> str:
        """redis-server on the host's address (AOF on); its ``redis://host:port``."""
        self.start(host, ["redis-server", "--bind", host.address, "--port", "6379", "--protected-mode", "no",
                          "--save", "", "--appendonly", "yes", "--dir", str(folder)], env=dict(os.environ),
                   log=folder / "redis.log")
        return f"redis://{host.address}:6379"

    def start_postgres(self, host: Host, folder: Path) -> str:
        """Postgres + pgvector (pgserver's build) on the host's address only, scram passwords over TCP, initialised
        and run as the unprivileged user; databases ``ingestion`` and ``dagster``. Returns the first's URL."""
        import pwd

        ensure_user_exists(PG_USER)
        data = folder / "pgdata"
        data.mkdir()
        (folder / "pw").write_text(PG_PASSWORD)
        uid = pwd.getpwnam(PG_USER).pw_uid
        for path in (folder, data, folder / "pw"):
            os.chown(path, uid, -1)
        result = self.run(host, [str(PG_BIN / "initdb"), "-D", str(data), "-U", "ingestion",
                                 f"--pwfile={folder / 'pw'}", "--auth-host=scram-sha-256", "--auth-local=trust",
                                 "-E", "UTF8"], env=dict(os.environ), user=PG_USER)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr}")
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.subnet}.0/24 scram-sha-256\n")
        self.start(host, [str(PG_BIN / "postgres"), "-D", str(data), "-c", f"listen_addresses={host.address}",
                          "-c", f"unix_socket_directories={data}", "-c", "max_connections=300",
                          "-c", "shared_buffers=256MB"], env=dict(os.environ), log=folder / "postgres.log",
                   user=PG_USER)
        admin = f"postgresql://ingestion:{PG_PASSWORD}@{host.address}:5432/postgres"
        wait_for(lambda: psycopg.connect(admin, connect_timeout=2).close() or True, "Postgres on the db host")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE ingestion")
            conn.execute("CREATE DATABASE dagster")
        return f"postgresql://ingestion:{PG_PASSWORD}@{host.address}:5432/ingestion"

    def link(self, host: Host, *, up: bool) -> None:
        _ip("link", "set", host.veth, "up" if up else "down")

    def kill_host(self, host: Host) -> None:
        """SIGKILL every process of the host at once (a host that dies)."""
        for pid in host.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in host.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def close(self) -> None:
        for host in self.hosts.values():
            for proc in host.processes:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for host in self.hosts.values():
            for proc in host.processes:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            for pid in host.pids():  # anything the host's processes left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
