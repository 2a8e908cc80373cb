"""What distributing the steps costs: the same small files in-process, with one Celery worker and with two.

Each configuration ingests its own copy of the files (a tenant of its own, so nothing is skipped) into one
throwaway database, with the S3 upload store on a moto server, a real redis-server as broker and
`ingestion-pipeline worker` processes (INGESTION_EXECUTOR=celery); `process` orchestrates. Printed per
configuration: wall time of `process`; CPU seconds per file of every process involved (the workers and
their pools, `process`, `submit`, Postgres, the moto server in this process, redis-server); bytes fetched
from S3 per file (the workers' own counts); and the most Postgres connections each role held at once
(PGAPPNAME names them).

With ``--hosts`` (root: Linux network namespaces, ``ingestion_pipeline_tests/faults/hosts.py``) every service is a
host of its own that shares nothing but the network: db (Postgres on its address, passwords over TCP), s3 (moto
server), broker (redis-server), dagster (`submit` and `process`), worker1, worker2; CPU and Postgres connections
are then counted per host. Without it, everything is a process on this host.

On this 2-core machine two workers will not be faster: the figure to watch is the CPU per file of
distribution against the in-process run (goal: the one- and two-worker runs <= 1.15x), not speed.

    .venv/bin/python benchmarks/multi_host.py [--files 300] [--only in_process,1,2] [--hosts]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_peers import small_files  # noqa: E402
from throwaway_database import throwaway_database  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ingestion-pipeline")
TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """utime + stime + the waited children's, of one process (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def postgres_cpu(url: str) -> float:
    """CPU of the server: its postmaster (with the backends it reaped) and the processes alive now."""
    import psutil
    import psycopg

    with psycopg.connect(url) as conn:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
    postmaster = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    total = _proc_cpu(postmaster)
    for child in psutil.Process(postmaster).children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


class ConnectionSampler(threading.Thread):
    """The most connections each application_name held at once, sampled every 0.5 s."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.peak, self._done = url, {}, threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._done.wait(0.5):
                for name, n in conn.execute(
                        """SELECT coalesce(nullif(application_name, ''), '?'), count(*) FROM pg_stat_activity
                            WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"""):
                    self.peak[name] = max(self.peak.get(name, 0), n)

    def stop(self) -> dict[str, int]:
        self._done.set()
        self.join(5)
        return self.peak


def run_configuration(label: str, workers: int, files: list[Path], env: dict[str, str], url: str,
                      logs: Path, redis_pid: int) -> dict:
    tenant = f"mh{label.replace('_', '')}"
    executor = "in_process" if workers == 0 else "celery"
    env = {**env, "INGESTION_EXECUTOR": executor}
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    pg_before, redis_before = postgres_cpu(url), _proc_cpu(redis_pid)
    procs = []
    for i in range(workers):
        log = (logs / f"{label}-worker{i + 1}.log").open("w")
        procs.append(subprocess.Popen([CLI, "worker", "--name", f"worker{i + 1}@%h"], stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      env={**env, "PGAPPNAME": f"worker{i + 1}"}))
    submit = subprocess.run([CLI, "submit", *map(str, files), "--tenant", tenant, "--json"], capture_output=True,
                            text=True, env={**env, "PGAPPNAME": "submit"})
    if submit.returncode != 0:
        raise SystemExit(f"submit failed: {submit.stderr[-2000:]}")
    sampler = ConnectionSampler(url)
    sampler.start()
    start = time.perf_counter()
    done = subprocess.run([CLI, "process", "--json"], capture_output=True, text=True,
                          env={**env, "PGAPPNAME": "process"})
    wall = time.perf_counter() - start
    peak = sampler.stop()
    if done.returncode != 0:
        raise SystemExit(f"process failed ({label}): {done.stderr[-3000:]}")
    for proc in procs:  # warm shutdown: the pools' children are reaped, so their CPU counts below
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {
        "processes": (children.ru_utime + children.ru_stime) - (children_before.ru_utime + children_before.ru_stime),
        "postgres": postgres_cpu(url) - pg_before,
        "moto (this process)": (own.ru_utime + own.ru_stime) - (self_before.ru_utime + self_before.ru_stime),
        "redis": _proc_cpu(redis_pid) - redis_before,
    }
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            """SELECT count(*) AS files, count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                      coalesce(sum((stats->>'raw_fetched_bytes')::bigint), 0) AS fetched,
                      coalesce(sum(size_bytes), 0) AS size
                 FROM ingestion_runs WHERE tenant_id = %s""", (tenant,)).fetchone()
    n = row[0]
    return {"label": label, "files": n, "succeeded": row[1], "wall_s": wall, "cpu": cpu,
            "cpu_per_file": sum(cpu.values()) / n, "s3_bytes_per_file": row[2] / n, "bytes_per_file": row[3] / n,
            "connections": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--only", default="in_process,1,2", help="configurations: in_process and worker counts")
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "documents")
    parser.add_argument("--hosts", action="store_true", help="each service a network namespace of its own (root)")
    args = parser.parse_args()
    if args.hosts:
        from multi_host_namespaces import run_on_hosts

        report(run_on_hosts(args.files, args.only.split(","), args.corpus))
        return

    from moto.server import ThreadedMotoServer

    from ingestion_pipeline.core.redis_server import RedisServer, free_port
    from ingestion_pipeline.core.settings import instance_home

    work = Path(tempfile.mkdtemp(prefix="multi-host-"))
    moto_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    redis = RedisServer(work / "redis", port=free_port()).start()
    try:
        import boto3

        endpoint = f"http://127.0.0.1:{moto_port}"
        aws = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=endpoint, **{"region_name": "us-east-1", "aws_access_key_id": "bench",
                                                     "aws_secret_access_key": "bench"}).create_bucket(Bucket="store")
        files = small_files(args.corpus, work / "files", args.files)
        home = work / "dagster_home"
        home.mkdir()
        shutil.copy(instance_home() / "dagster.yaml", home / "dagster.yaml")
        with throwaway_database("multihost") as url:
            env = {**os.environ, **aws, "DATABASE_URL": url,
                   "DAGSTER_PG_URL": url.replace("postgresql://", "postgresql+psycopg2://", 1),
                   "DAGSTER_HOME": str(home), "REDIS_URL": redis.url,
                   "INGESTION_UPLOAD_STORE": "s3://store/uploads", "INGESTION_UPLOAD_STORE_ENDPOINT_URL": endpoint,
                   "INGESTION_DATA_DIR": str(work / "data"), "INGESTION_EMBEDDING_PRECISION": "f32"}
            results = []
            for label in args.only.split(","):
                workers = 0 if label == "in_process" else int(label)
                name = "in_process" if workers == 0 else f"{workers}_worker{'s' if workers > 1 else ''}"
                print(f"{name}: {len(files)} files ...", file=sys.stderr, flush=True)
                results.append(run_configuration(name, workers, files, env, url, work, redis.process.pid))
        report(results)
    finally:
        redis.stop()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(results: list[dict]) -> None:
    base = next((r for r in results if r["label"] == "in_process"), results[0])
    print(f"\n{'configuration':<14}{'files':>7}{'ok':>6}{'wall s':>9}{'CPU s/file':>12}{'vs in-process':>15}"
          f"{'S3 B/file':>11}{'file B':>8}  peak Postgres connections")
    for r in results:
        connections = ", ".join(f"{k} {v}" for k, v in sorted(r["connections"].items()))
        print(f"{r['label']:<14}{r['files']:>7}{r['succeeded']:>6}{r['wall_s']:>9.1f}{r['cpu_per_file']:>12.3f}"
              f"{r['cpu_per_file'] / base['cpu_per_file']:>14.2f}x{r['s3_bytes_per_file']:>11.0f}"
              f"{r['bytes_per_file']:>8.0f}  {connections}")
    for r in results:
        gets = f"; S3 GETs per file {r['gets_per_file']:.2f}" if "gets_per_file" in r else ""
        print(f"  {r['label']}: CPU s " + ", ".join(f"{k} {v:.1f}" for k, v in r["cpu"].items()) + gets)


if __name__ == "__main__":
    main()
