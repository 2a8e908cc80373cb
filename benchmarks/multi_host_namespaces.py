"""``multi_host.py --hosts``: the same configurations with every service on a host of its own (a Linux network
namespace, ``ingestion_pipeline_tests/faults/hosts.py``): CPU seconds and Postgres connections per host."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compare_peers import small_files  # noqa: E402

from ingestion_pipeline_tests.faults.hosts import Network, usable, wait_for  # noqa: E402

CLI = str(Path(sys.executable).parent / "ingestion-pipeline")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_on_hosts(count: int, configurations: list[str], corpus: Path) -> list[dict]:
    if not usable():
        raise SystemExit("--hosts needs root, iproute2 and runuser")
    root = Path(tempfile.mkdtemp(prefix="multi-host-"))
    os.chmod(root, 0o755)
    net = Network()
    try:
        hosts, folders = net.add_hosts(("db", "s3", "broker", "dagster", "worker1", "worker2"), root)
        url = net.start_postgres(hosts["db"], folders["db"])
        s3 = net.start_s3(hosts["s3"], folders["s3"])
        broker = net.start_redis(hosts["broker"], folders["broker"])
        import boto3

        client = boto3.client("s3", endpoint_url=s3, region_name="us-east-1", aws_access_key_id="bench",
                              aws_secret_access_key="bench")
        wait_for(lambda: client.create_bucket(Bucket="store"), "the S3 host")
        common = {k: v for k, v in os.environ.items() if not k.startswith(("INGESTION_", "DATABASE_URL", "DAGSTER_",
                                                                             "REDIS_URL"))}
        common.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
                      AWS_DEFAULT_REGION="us-east-1", DATABASE_URL=url,
                      DAGSTER_PG_URL=url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://")
                      + "/dagster",
                      REDIS_URL=f"{broker}/0",
                      CELERY_BROKER_URL=f"{broker}/1",
                      INGESTION_UPLOAD_STORE="s3://store/uploads", INGESTION_UPLOAD_STORE_ENDPOINT_URL=s3,
                      INGESTION_EMBEDDING_PRECISION="f32")
        cache = Path(os.environ.get("INGESTION_MODEL_CACHE_DIR") or ROOT / ".data" / "models")

        def env_of(name: str, **extra: str) -> dict[str, str]:
            home, models = folders[name] / "dagster_home", folders[name] / "models"
            if not home.exists():
                home.mkdir()
                shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home)
                if cache.is_dir():
                    shutil.copytree(cache, models)
            return {**common, "INGESTION_DATA_DIR": str(folders[name] / "data"), "DAGSTER_HOME": str(home),
                    "INGESTION_MODEL_CACHE_DIR": str(models), "PGAPPNAME": name, **extra}

        migrate = net.run(hosts["dagster"], [CLI, "db", "migrate"], env=env_of("dagster"))
        if migrate.returncode != 0:
            raise SystemExit(f"migrate failed: {migrate.stderr[-2000:]}")
        files = small_files(corpus, root / "files", count)
        by_address = {h.address: name for name, h in hosts.items()}
        results = []
        for label in configurations:
            workers = 0 if label == "in_process" else int(label)
            name = "in_process" if workers == 0 else f"{workers}_worker{'s' if workers > 1 else ''}"
            print(f"{name} (hosts): {len(files)} files ...", file=sys.stderr, flush=True)
            results.append(_configuration(net, hosts, folders, env_of, url, files, name, workers, by_address))
        return results
    finally:
        net.close()
        shutil.rmtree(root, ignore_errors=True)


def _configuration(net, hosts, folders, env_of, url, files, label, workers, by_address) -> dict:
    tenant = f"mh{label.replace('_', '')}"
    executor = {"INGESTION_EXECUTOR": "in_process" if workers == 0 else "celery"}
    steady = ("db", "s3", "broker")
    before = {name: hosts[name].cpu_seconds() for name in steady}
    orchestrator_before = _children_cpu()
    worker_hosts = [hosts[f"worker{i + 1}"] for i in range(workers)]
    procs = [net.start(h, [CLI, "worker", "--name", f"{h.name}@%h"], env=env_of(h.name, **executor),
                       log=folders[h.name] / f"{label}.log") for h in worker_hosts]
    submit = net.run(hosts["dagster"], [CLI, "submit", *map(str, files), "--tenant", tenant, "--json"],
                     env=env_of("dagster", **executor), timeout=1200)
    if submit.returncode != 0:
        raise SystemExit(f"submit failed: {submit.stderr[-2000:]}")
    peak: dict[str, int] = {}
    start = time.perf_counter()
    process = net.start(hosts["dagster"], [CLI, "process", "--json"], env=env_of("dagster", **executor),
                        log=folders["dagster"] / f"{label}-process.log")
    with psycopg.connect(url, autocommit=True) as conn:
        while process.poll() is None:
            for address, n in conn.execute(
                    """SELECT host(client_addr), count(*) FROM pg_stat_activity WHERE client_addr IS NOT NULL
                        AND pid <> pg_backend_pid() GROUP BY 1"""):
                host = by_address.get(address, address)
                if host != "db":
                    peak[host] = max(peak.get(host, 0), n)
            time.sleep(0.5)
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"process failed ({label}): see {folders['dagster'] / f'{label}-process.log'}")
    cpu = {name: hosts[name].cpu_seconds() - before[name] for name in steady}
    # submit and process, reaped: before the workers are (they are this process's children too)
    cpu["dagster"] = _children_cpu() - orchestrator_before
    for host, proc in zip(worker_hosts, procs, strict=True):
        cpu[host.name] = host.cpu_seconds()  # the worker and its pool, alive until now
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            """SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'),
                      coalesce(sum((stats->>'raw_fetched_bytes')::bigint), 0), coalesce(sum(size_bytes), 0)
                 FROM ingestion_runs WHERE tenant_id = %s""", (tenant,)).fetchone()
    log = (folders["s3"] / "moto.log").read_text(errors="replace")
    gets = len(re.findall(rf'"GET /store/uploads/documents/{tenant}/', log))
    n = row[0]
    return {"label": label, "files": n, "succeeded": row[1], "wall_s": wall, "cpu": cpu,
            "cpu_per_file": sum(cpu.values()) / n, "s3_bytes_per_file": row[2] / n, "bytes_per_file": row[3] / n,
            "connections": peak, "gets_per_file": gets / n}
