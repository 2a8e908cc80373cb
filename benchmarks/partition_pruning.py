"""What 50,000 finished batches cost Dagster before and after they are pruned (``partition_pruning_job``).

Sets up, on the project's Postgres server (embedded unless ``BENCH_DATABASE_URL`` says otherwise), a throwaway
application database and a throwaway Dagster storage database, then:

1. adds ``--partitions`` finished batches: ledger rows finished 40 days ago, their ``document_batches``
   partitions, and a materialisation of ``promoted_documents`` for each;
2. queues a few new files, so a sensor tick has a batch to plan;
3. measures, with every partition present: an ``upload_sensor`` tick (median of ``--repeats``), reading the
   partition list (what the launchpad and backfill dialog read), and the asset page's GraphQL query for
   ``promoted_documents`` (partition keys, statuses and counts) against a real ``dagster-webserver``;
4. prunes (the job's own function, ``prune_finished_partitions``) and times it;
5. measures the same again.

    .venv/bin/python benchmarks/partition_pruning.py [--partitions 50000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throwaway_database import throwaway_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAIN_SAMPLE = 200
ASSET_PAGE_QUERY = """
query AssetPage($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      partitionKeysByDimension { name partitionKeys }
      partitionStats { numMaterialized numPartitions numFailed numMaterializing }
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions failedPartitions materializingPartitions }
      }
    }
  }
}
"""


@contextlib.contextmanager
def dagster_storage(server_url: str) -> Iterator[str]:
    """An empty database for Dagster's own storage (runs, events, partitions), as a dagster-postgres URL
    (psycopg2 driver, like ``core/db.resolve_dagster_storage_url``); dropped on exit."""
    import psycopg

    name = f"bench_dagster_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, query = server_url.partition("?")
    url = (base.rsplit("/", 1)[0] + f"/{name}").replace("postgresql://", "postgresql+psycopg2://", 1)
    try:
        yield f"{url}?{query}" if query else url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def seed_finished_batches(db_url: str, instance, count: int) -> list[str]:
    """``count`` batches of one succeeded file each, finished 40 days ago, with partition and materialisation."""
    import dagster as dg
    import psycopg

    from ingestion_pipeline.defs.partitions import document_batches

    keys = [f"bench-{i:06d}" for i in range(count)]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('bench') ON CONFLICT DO NOTHING")
        conn.execute("""INSERT INTO documents (tenant_id, source_uri)
                        SELECT 'bench', 'upload://bench/' || i FROM generate_series(0, %s - 1) i""", (count,))
        conn.execute(
            """INSERT INTO ingestion_runs (tenant_id, doc_id, status, source_uri, content_hash, size_bytes,
                                           partition_key, attempts, started_at, finished_at, updated_at)
               SELECT 'bench', d.doc_id, 'succeeded', d.source_uri, md5(d.source_uri), 100,
                      'bench-' || lpad(substr(d.source_uri, 16), 6, '0'), 1,
                      now() - interval '40 days', now() - interval '40 days', now() - interval '40 days'
                 FROM documents d WHERE d.tenant_id = 'bench'""")
    for start in range(0, count, 5000):
        instance.add_dynamic_partitions(document_batches.name, keys[start:start + 5000])
    started = time.perf_counter()
    for i, key in enumerate(keys):
        instance.report_runless_asset_event(dg.AssetMaterialization("promoted_documents", partition=key))
        if (i + 1) % 10_000 == 0:
            rate = (i + 1) / (time.perf_counter() - started)
            print(f"  {i + 1:,} of {count:,} materialisations recorded ({rate:,.0f}/s, "
                  f"ETA {(count - i - 1) / rate:.0f} s)", flush=True)
    return keys


def queue_new_files(db_url: str, files: int) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("""INSERT INTO documents (tenant_id, source_uri)
                        SELECT 'bench', 'upload://bench/new-' || i FROM generate_series(1, %s) i""", (files,))
        conn.execute(
            """INSERT INTO ingestion_runs (tenant_id, doc_id, status, source_uri, content_hash, size_bytes)
               SELECT 'bench', doc_id, 'queued', source_uri, md5(source_uri), 100
                 FROM documents WHERE source_uri LIKE 'upload://bench/new-%%'""")


class Webserver:
    """A real ``dagster-webserver`` on 127.0.0.1 over the code location, started and stopped by PID."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = _port()
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-webserver"), "-m", "ingestion_pipeline.definitions",
             "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"dagster-webserver stopped:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=2).read()
                return
            time.sleep(0.5)
        raise SystemExit(f"dagster-webserver did not start:\n{log_path.read_text()[-3000:]}")

    def asset_page(self) -> dict:
        body = json.dumps({"query": ASSET_PAGE_QUERY, "variables": {"key": {"path": ["promoted_documents"]}}})
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/graphql", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=600).read())
        if answer.get("errors"):
            raise SystemExit(f"GraphQL errors: {answer['errors']}")
        return answer["data"]["assetNodeOrError"]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


def measure(label: str, instance, webserver: Webserver, repeats: int) -> dict[str, float]:
    import dagster as dg

    from ingestion_pipeline.defs.partitions import document_batches
    from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
    from ingestion_pipeline.defs.sources.upload_sensor import upload_sensor

    def tick() -> None:
        with dg.build_sensor_context(instance=instance, resources={"postgres": PostgresResource(),
                                                                   "settings": SettingsResource()}) as context:
            result = upload_sensor(context)
        assert result.run_requests, "the tick planned nothing: the queued files are missing"

    page = webserver.asset_page()
    figures = {
        "partitions": float(page["partitionStats"]["numPartitions"]),
        "upload_sensor tick (s)": _median_seconds(tick, repeats),
        "partition list read (s)": _median_seconds(
            lambda: instance.get_dynamic_partitions(document_batches.name), repeats),
        "asset page GraphQL (s)": _median_seconds(webserver.asset_page, repeats),
    }
    print(f"\n{label}:")
    for name, value in figures.items():
        print(f"  {name:<26} {value:,.0f}" if name == "partitions" else f"  {name:<26} {value:.3f}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="ip-pruning-bench-"))
    from ingestion_pipeline.core.db import resolve_database_url

    server_url = os.environ.get("BENCH_DATABASE_URL") or resolve_database_url(allow_embedded=True)
    with throwaway_database("bench_pruning") as db_url, dagster_storage(server_url) as dagster_url:
        (work / "dagster.yaml").write_text(
            f"storage:\n  postgres:\n    postgres_url: \"{dagster_url}\"\ntelemetry:\n  enabled: false\n")
        env = {**os.environ, "DAGSTER_HOME": str(work), "DATABASE_URL": db_url, "DAGSTER_PG_URL": dagster_url,
               "INGESTION_PARTITION_RETENTION_DAYS": "30"}
        os.environ.update(env)
        import dagster as dg

        from ingestion_pipeline.core.db import Database
        from ingestion_pipeline.core.settings import load_settings
        from ingestion_pipeline.defs.ledger.partition_pruning import prune_finished_partitions
        from ingestion_pipeline.defs.partitions import document_batches
        from ingestion_pipeline.runtime.pooled_instance import pooled_instance

        # Pooled storage connections (as `process` and the webserver keep them): a plain instance opens one
        # per call, which makes seeding 50,000 events take ~20 minutes. The sample below gives the plain rate.
        instance = pooled_instance()
        plain = dg.DagsterInstance.get()
        print(f"seeding {args.partitions:,} finished batches (ledger rows, partitions, materialisations) …",
              flush=True)
        started = time.perf_counter()
        seed_finished_batches(db_url, instance, args.partitions)
        queue_new_files(db_url, 20)
        print(f"seeded in {time.perf_counter() - started:.0f} s", flush=True)
        webserver = Webserver(env, work / "webserver.log")
        try:
            before = measure(f"before pruning ({args.partitions:,} finished batches)", instance, webserver,
                             args.repeats)
            sample = instance.get_dynamic_partitions(document_batches.name)[:PLAIN_SAMPLE]
            started = time.perf_counter()
            for key in sample:  # what partition_pruning_job's run worker does (a plain instance), on a sample
                plain.delete_dynamic_partition(document_batches.name, key)
                plain.add_dynamic_partitions(document_batches.name, [key])
            plain_rate = len(sample) / (time.perf_counter() - started)
            with Database(db_url) as db:
                started = time.perf_counter()
                pruned = prune_finished_partitions(instance, db, load_settings().reliability)
                prune_seconds = time.perf_counter() - started
            print(f"\npruned {sum(pruned.values()):,} partitions in {prune_seconds:.1f} s "
                  f"({sum(pruned.values()) / prune_seconds:,.0f}/s pooled; a plain instance, as in the job's run "
                  f"worker: {plain_rate:,.0f} delete+add pairs/s on {len(sample)})")
            after = measure("after pruning", instance, webserver, args.repeats)
        finally:
            webserver.stop()
            instance.dispose()
            plain.dispose()
    print("\n                            before      after")
    for name in ("upload_sensor tick (s)", "partition list read (s)", "asset page GraphQL (s)"):
        print(f"  {name:<26} {before[name]:>8.3f}  {after[name]:>8.3f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
