"""The pipeline on seven hosts that share nothing but a network (Linux network namespaces, one address each):

db (Postgres + pgvector on its address, password auth), s3 (moto server), broker (redis-server), api (the HTTP
API), dagster (`dagster dev`: code server, daemon with the sensors, webserver), worker1 and worker2
(`ingestion-pipeline worker`, INGESTION_EXECUTOR=celery). Every process has its own data folder and reaches the
others only by their addresses. A 6-page scan (three units, each a step of its own) and 40 files posted to the API
become searchable while worker1 is SIGKILLed (every process of the host) twice — just after it kept one unit of
the scan, then, restarted, inside an embedding step — and the db host's link is down for 10 s; the scan has
exactly one active version and no chunk twice, its kept unit is not read again; a metric export posted to the API
is promoted once. Prints each host's CPU seconds and the bytes fetched from S3 per file.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages
from ingestion_pipeline_tests.faults.harness import CLI, ActiveVersionWatcher, invariant_violations, unfinished
from ingestion_pipeline_tests.faults.hosts import Network, usable, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

def test_hosts_that_share_nothing(tmp_path):
    if not usable():
        pytest.skip("network namespaces need root, iproute2 and runuser")
    root = Path(tempfile.mkdtemp(prefix="hosts-"))
    os.chmod(root, 0o755)  # the unprivileged Postgres user reaches its folder under it
    net = Network()
    try:
        hosts, folders = net.add_hosts(("db", "s3", "broker", "api", "dagster", "worker1", "worker2"), root)
        url = net.start_postgres(hosts["db"], folders["db"])
        s3 = net.start_s3(hosts["s3"], folders["s3"])
        broker = net.start_redis(hosts["broker"], folders["broker"])
        aws = {"AWS_ACCESS_KEY_ID": "hosts", "AWS_SECRET_ACCESS_KEY": "hosts", "AWS_REGION": "us-east-1",
               "AWS_DEFAULT_REGION": "us-east-1"}
        import boto3

        client = boto3.client("s3", endpoint_url=s3, region_name="us-east-1", aws_access_key_id="hosts",
                              aws_secret_access_key="hosts")
        wait_for(lambda: client.create_bucket(Bucket="store"), "the S3 host")
        jwt = "j" * 48
        common = {k: v for k, v in os.environ.items() if not k.startswith(("INGESTION_", "DATABASE_URL", "DAGSTER_",
                                                                             "REDIS_URL", "PYTEST_"))}
        common.update(aws, DATABASE_URL=url, DAGSTER_PG_URL=url.rsplit("/", 1)[0].replace(
            "postgresql://", "postgresql+psycopg2://") + "/dagster",
            REDIS_URL=f"{broker}/0",
            CELERY_BROKER_URL=f"{broker}/1",
            INGESTION_EXECUTOR="celery", INGESTION_UPLOAD_STORE="s3://store/uploads",
            INGESTION_UPLOAD_STORE_ENDPOINT_URL=s3, INGESTION_EMBEDDING_PRECISION="f32",
            JWT_SECRET=jwt,
            INGESTION_WORKER_REDELIVER_SECONDS="20", INGESTION_LEASE_SECONDS="120", INGESTION_BATCH_MAX_FILES="10",
            INGESTION_RETRY_BACKOFF="2,4,8,16", INGESTION_UNIT_PAGES="2")

        def env_of(name: str, **extra: str) -> dict[str, str]:
            """The host's own folders: data, Dagster home, and its model cache (a copy, as an image would carry)."""
            home, models = folders[name] / "dagster_home", folders[name] / "models"
            if not home.exists():
                home.mkdir()
                shutil.copy(Path(__file__).resolve().parents[2] / "dagster_home" / "dagster.yaml", home)
                shutil.copytree(os.environ["INGESTION_MODEL_CACHE_DIR"], models)
            return {**common, "INGESTION_DATA_DIR": str(folders[name] / "data"), "DAGSTER_HOME": str(home),
                    "INGESTION_MODEL_CACHE_DIR": str(models), "PGAPPNAME": name, **extra}

        migrate = net.run(hosts["dagster"], [CLI, "db", "migrate"], env=env_of("dagster"))
        assert migrate.returncode == 0, migrate.stderr
        added = net.run(hosts["api"], [CLI, "users", "add", "ops@acme.example", "--tenant", "acme", "--role", "admin",
                                       "--password-stdin"], env=env_of("api"), stdin="a long password\n")
        assert added.returncode == 0, added.stderr
        net.start(hosts["api"], [CLI, "serve", "--host", hosts["api"].address, "--port", "8000"], env=env_of("api"),
                  log=folders["api"] / "api.log")
        markers = folders["worker1"] / "failpoints"
        markers.mkdir()

        def start_worker1(point: str) -> None:
            net.start(hosts["worker1"], [CLI, "worker", "--name", "worker1@%h"],
                      env=env_of("worker1", INGESTION_FAILPOINT=point, INGESTION_ALLOW_FAILPOINTS="1",
                                 INGESTION_FAILPOINT_DIR=str(markers)), log=folders["worker1"] / "worker.log")

        start_worker1("extract.unit_done")
        net.start(hosts["dagster"], [CLI, "dev", "--port", "3000", "--api-port", "0"], env=env_of("dagster"),
                  log=folders["dagster"] / "dagster.log")

        api = f"http://{hosts['api'].address}:8000"
        token = wait_for(lambda: httpx.post(f"{api}/v1/auth/token", json={
            "email": "ops@acme.example", "password": "a long password"}).json()["access_token"], "the API", 180)
        auth = {"Authorization": f"Bearer {token}"}
        scan = write_scanned_pages(tmp_path / "harbour-minutes.pdf", [
            [f"Harbour minutes, page {page}", f"The pilots of berth {page} report calm water in spring {page}."]
            for page in range(1, 7)])
        files = [scan, *_files(tmp_path, 40)]
        watcher = ActiveVersionWatcher(url, interval=0.1)  # at every moment one active version per document
        watcher.start()
        for path in files:
            with path.open("rb") as body:
                r = httpx.post(f"{api}/v1/ingest", headers=auth, files={"file": (path.name, body)}, timeout=60)
            assert r.status_code == 202, r.text

        # worker1 dies just after it kept a unit of the scan, the others not read yet: every process of the host
        wait_for(lambda: list(markers.glob("*.extract.unit_done")), "worker1 to keep a unit of the scan", 600)
        worker1_cpu = hosts["worker1"].cpu_seconds()
        net.kill_host(hosts["worker1"])
        # restarted, it dies again inside an embedding step
        start_worker1("embed.unit")
        wait_for(lambda: list(markers.glob("*.embed.unit")), "worker1 in an embedding step", 600)
        worker1_cpu += hosts["worker1"].cpu_seconds()  # what it had used when it died
        net.kill_host(hosts["worker1"])
        # worker2's worker starts now: with both from the start, worker2 could take every embedding step and
        # worker1 would never be caught inside one
        net.start(hosts["worker2"], [CLI, "worker", "--name", "worker2@%h"], env=env_of("worker2"),
                  log=folders["worker2"] / "worker.log")
        # the db host's link goes down for 10 s once promotions have started
        db_url_root = url
        wait_for(lambda: psycopg.connect(db_url_root).execute(
            "SELECT 1 FROM document_versions WHERE is_active LIMIT 1").fetchone(), "a first promotion", 900)
        with psycopg.connect(url) as conn:
            done_before = conn.execute("SELECT count(*) FROM ingestion_runs WHERE status = 'succeeded'").fetchone()[0]
        net.link(hosts["db"], up=False)
        time.sleep(10)
        net.link(hosts["db"], up=True)
        print(f"\nthe db host's link was down for 10 s with {done_before} of {len(files)} files promoted")

        export = write_export(tmp_path / "export.csv", "meta", daily_rows(2, 2, 2, 5))
        r = wait_for(lambda: httpx.post(f"{api}/v1/metrics/uploads", headers=auth, data={"platform": "meta"},
                                     files={"file": (export.name, export.read_bytes())}, timeout=60),
                  "the metric upload")
        assert r.status_code == 202, r.text

        def settled():
            with psycopg.connect(url) as conn:
                files_left = conn.execute("SELECT count(*) FROM ingestion_runs WHERE status NOT IN "
                                          "('succeeded', 'failed', 'dead_letter', 'canceled')").fetchone()[0]
                uploads = conn.execute("SELECT status FROM data_uploads").fetchall()
            return files_left == 0 and uploads and uploads[0][0] in ("completed", "failed")

        wait_for(settled, "every file and the metric upload to settle", 1200, every=2)
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT status, attempts, stats, size_bytes FROM ingestion_runs").fetchall()
            active = conn.execute("SELECT doc_id, count(*) FROM document_versions WHERE is_active "
                                  "GROUP BY doc_id").fetchall()
            upload = conn.execute("SELECT status, promoted_rows FROM data_uploads").fetchall()
            events = conn.execute("SELECT count(*) FROM ingestion_events").fetchone()[0]
            hits = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert [r[0] for r in rows] == ["succeeded"] * 41, rows
        assert len(active) == 41 and {n for _, n in active} == {1}  # one active version each, none lost
        assert upload == [("completed", 40)] and events == 1  # the export promoted once
        assert hits > 0
        search = httpx.get(f"{api}/v1/search", headers=auth, params={"q": "rollout of the office"}, timeout=60)
        assert search.status_code == 200 and search.json()["hits"], search.text
        assert not unfinished(url) and not invariant_violations(url)
        _the_scans_units_survived_the_kill(url, common["DAGSTER_PG_URL"])
        watcher.stop()
        assert watcher.samples > 0 and watcher.violations == []
        # worker1 took tasks before it died; worker2 finished what it left
        assert "execute_plan" in (folders["worker1"] / "worker.log").read_text(errors="replace")
        assert "succeeded in" in (folders["worker2"] / "worker.log").read_text(errors="replace")
        shared = [v for k, v in env_of("worker2").items() if "127.0.0.1" in v or "localhost" in v]
        assert shared == []  # nothing is addressed as this machine's loopback across hosts

        whole_files = [r for r in rows if "units" not in (r[2] or {})]
        fetched = [(r[2] or {}).get("raw_fetched_bytes", 0) for r in whole_files]
        assert len(whole_files) == 40 and fetched == [r[3] for r in whole_files]  # the extracting step downloaded it
        # what the S3 host served: each document object's GETs, from its request log (one per attempt, not per step;
        # the scan's units each fetch it on their worker)
        gets = Counter(re.findall(r'"GET /store/uploads/documents/acme/([0-9a-f]{64})',
                                  (folders["s3"] / "moto.log").read_text(errors="replace")))
        assert len(gets) == 41, gets
        assert sorted(gets.values())[-2] <= max(r[1] for r in whole_files), gets
        cpu = {name: round(h.cpu_seconds(), 1) for name, h in hosts.items()}
        cpu["worker1"] = round(worker1_cpu, 1)
        print("CPU seconds by host (worker1: until it was killed):", cpu)
        print(f"bytes fetched from S3 per file: mean {sum(fetched) / len(fetched):,.0f} (= its size), "
              f"GETs per file: {sum(gets.values()) / len(gets):.2f}; "
              f"files that needed a second attempt: {sum(1 for r in rows if r[1] > 1)}")
    finally:
        net.close()
        shutil.rmtree(root, ignore_errors=True)


def _the_scans_units_survived_the_kill(url: str, dagster_url: str) -> None:
    """The scan became one version of all its pages, each chunk once; its units were steps on both workers, and
    the unit worker1 kept before it died was found kept when the step was delivered again (not read twice)."""
    with psycopg.connect(url) as conn:
        [(stats, version_id)] = conn.execute(
            """SELECT r.stats, v.version_id FROM ingestion_runs r JOIN document_versions v
                   ON v.file_id = r.file_id WHERE r.config->>'filename' = 'harbour-minutes.pdf'""").fetchall()
        chunks = conn.execute("SELECT ordinal, text, page_start, page_end FROM chunks WHERE version_id = %s "
                              "ORDER BY ordinal", (version_id,)).fetchall()
    assert (stats["units"], stats["ocr_pages_read"]) == (3, 6), stats
    assert [c[0] for c in chunks] == list(range(len(chunks)))  # each chunk once
    assert (min(c[2] for c in chunks), max(c[3] for c in chunks)) == (1, 6)
    text = " ".join(c[1] for c in chunks)
    assert all(f"berth {page} report" in text for page in range(1, 7)), text  # every unit's pages are there
    with psycopg.connect(dagster_url.replace("postgresql+psycopg2://", "postgresql://")) as conn:
        events = conn.execute("SELECT step_key, event FROM event_logs WHERE step_key LIKE %s",
                              ("%extract_unit[file_%",)).fetchall()
    workers = {(key, name) for key, event in events for name in re.findall(r"(worker[12])@", event)
               if "Celery worker" in event}
    assert {name for _, name in workers} == {"worker1", "worker2"}, workers
    assert any("already read" in event for _, event in events), "the kept unit was read again"


def _files(folder: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        path = folder / f"note-{i:02d}.md"
        body = " ".join(f"Sentence {j} of note {i} about the rollout of the office." for j in range(20 + i))
        path.write_text(f"# Note {i}\n\n{body}\n")
        paths.append(path)
    return paths
