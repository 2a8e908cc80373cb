"""S3 sources against a real S3 API (moto server on 127.0.0.1), through the intake service's listing, s3_sensor
and the document assets."""

import os
import threading
import time

import dagster as dg
import pytest

from ingestion_pipeline.cli.bootstrap import Context
from ingestion_pipeline.cli.intake import intake_duties
from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.defs.resources import (
    PostgresResource,
    S3Clients,
    SettingsResource,
    UploadStoreResource,
)
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.defs.sources.s3_sensor import s3_sensor
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.sources.registry import add_source, set_paused
from ingestion_pipeline.sources.sync_pass import sync_sources
from ingestion_pipeline_tests.helpers import DOCS, materialize_batch, pipeline_for, put, shared_embedder, table

pytestmark = pytest.mark.integration  # whole runs against a real S3 API (moto)


def resources(**pipeline):
    return {"postgres": PostgresResource(), "settings": SettingsResource(**pipeline),
            "upload_store": UploadStoreResource(), "s3": S3Resource()}


def tick(instance, **pipeline) -> dg.SensorResult:
    """A round of the intake service's listing (its ``sources`` duty), then s3_sensor's tick planning the batches."""
    settings = SettingsResource(**pipeline)
    with Context(os.environ["DATABASE_URL"], settings.get(), embedder=shared_embedder()) as ctx:
        [listing] = intake_duties(ctx, ("sources",))
        listing.round()
    with dg.build_sensor_context(instance=instance, resources={"postgres": PostgresResource(),
                                                               "settings": settings}) as context:
        return s3_sensor(context)


def run_all(instance, result: dg.SensorResult) -> list[dg.ExecuteInProcessResult]:
    runs = []
    for request in result.run_requests:
        runs.append(materialize_batch(instance, request.partition_key))
    return runs


def search(db, database, tenant, query):
    embedder = pipeline_for(database).embedder
    vector = embedder.embed([query])[0]
    return hybrid_search(db, tenant_id=tenant, query=query, query_vector=vector, k=10,
                         model=embedder.info.name)


def test_initial_sync_modify_delete_and_unchanged(kb, database, db):
    client, bucket, source = kb
    with dg.instance_for_test() as instance:
        first = tick(instance)
        assert len(first.run_requests) == 1
        request = first.run_requests[0]
        assert request.tags["ingestion/source"] == "handbook"
        assert request.partition_key.startswith("acme-handbook-")
        run_all(instance, first)
        runs = table(db, "SELECT * FROM ingestion_runs ORDER BY file_id")
        assert [(r["run_type"], r["status"]) for r in runs] == [("s3_sync", "succeeded")] * 3
        assert {r["source_uri"] for r in runs} == {f"s3://{bucket}/{k}" for k in DOCS}
        objects = {r["key"]: r for r in table(db, "SELECT * FROM source_objects")}
        assert objects["kb/logo.png"]["status"] == "skipped"
        assert "file type .png is not allowed" in objects["kb/logo.png"]["skip_reason"]
        assert {objects[k]["status"] for k in DOCS} == {"active"}

        # Unchanged bucket: no run, no download, nothing re-recorded (the skipped key stays recorded once).
        again = tick(instance)
        assert again.run_requests == []
        assert len(table(db, "SELECT * FROM ingestion_runs")) == 3

        # Modify one object: exactly one new version, the old one deactivated, the others untouched.
        put(client, bucket, "kb/launch.md", DOCS["kb/launch.md"] + "\nThe venue moved to Porto.\n")
        modified = tick(instance)
        assert len(modified.run_requests) == 1
        run_all(instance, modified)
        versions = table(db, """SELECT d.source_uri, v.version_number, v.is_active FROM document_versions v
                                 JOIN documents d USING (doc_id) ORDER BY d.source_uri, v.version_number""")
        launch = [(v["version_number"], v["is_active"]) for v in versions if v["source_uri"].endswith("launch.md")]
        assert launch == [(1, False), (2, True)]
        assert sum(1 for v in versions if not v["source_uri"].endswith("launch.md")) == 2
        newest = table(db, "SELECT stats FROM ingestion_runs ORDER BY file_id DESC LIMIT 1")[0]["stats"]
        assert newest["version_number"] == 2
        assert table(db, "SELECT count(*) AS n FROM ingestion_runs")[0]["n"] == 4  # others not re-processed
        assert any("Porto" in h.text for h in search(db, database, "acme", "Where is the venue?"))

        # Delete one: deactivated, nothing deleted, search stops returning it.
        chunks_before = table(db, "SELECT count(*) AS n FROM chunks")[0]["n"]
        client.delete_object(Bucket=bucket, Key="kb/payroll.md")
        deleted = tick(instance)
        assert deleted.run_requests == []
        payroll = table(db, """SELECT v.is_active FROM document_versions v JOIN documents d USING (doc_id)
                                WHERE d.source_uri LIKE '%%payroll.md'""")
        assert payroll == [{"is_active": False}]
        assert table(db, "SELECT status FROM source_objects WHERE key = 'kb/payroll.md'")[0]["status"] == "deleted"
        assert table(db, "SELECT count(*) AS n FROM chunks")[0]["n"] == chunks_before
        assert all("Salaries" not in h.text for h in search(db, database, "acme", "when are salaries paid"))
        ledger = table(db, "SELECT stats FROM ingestion_runs WHERE source_key = 'kb/payroll.md' ORDER BY file_id")
        assert ledger[-1]["stats"]["action"] == "deactivated"

        # The key comes back: a new version of the same document.
        put(client, bucket, "kb/payroll.md", DOCS["kb/payroll.md"])
        run_all(instance, tick(instance))
        payroll = table(db, """SELECT v.version_number, v.is_active FROM document_versions v JOIN documents d
                                USING (doc_id) WHERE d.source_uri LIKE '%%payroll.md' ORDER BY 1""")
        assert payroll == [{"version_number": 1, "is_active": False}, {"version_number": 2, "is_active": True}]


@pytest.mark.integration
def test_new_etag_same_bytes_makes_no_new_version(kb, db):
    client, bucket, _ = kb
    with dg.instance_for_test() as instance:
        run_all(instance, tick(instance))
        # Same bytes, new ETag: a multipart upload's ETag is not the MD5 of the bytes.
        upload = client.create_multipart_upload(Bucket=bucket, Key="kb/travel.txt")
        part = client.upload_part(Bucket=bucket, Key="kb/travel.txt", UploadId=upload["UploadId"], PartNumber=1,
                                  Body=DOCS["kb/travel.txt"].encode())
        client.complete_multipart_upload(Bucket=bucket, Key="kb/travel.txt", UploadId=upload["UploadId"],
                                         MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
        listed = client.head_object(Bucket=bucket, Key="kb/travel.txt")["ETag"].strip('"')
        stored = table(db, "SELECT etag FROM source_objects WHERE key = 'kb/travel.txt'")[0]["etag"]
        assert listed != stored
        result = tick(instance)
        assert len(result.run_requests) == 1
        run_all(instance, result)
        last = table(db, "SELECT status, stats FROM ingestion_runs ORDER BY file_id DESC LIMIT 1")[0]
        assert last["status"] == "succeeded" and last["stats"]["skipped"] == "already the active version"
        assert table(db, """SELECT count(*) AS n FROM document_versions v JOIN documents d USING (doc_id)
                             WHERE d.source_uri LIKE '%%travel.txt'""")[0]["n"] == 1


def test_paused_source_launches_nothing_and_resumes(kb, db):
    with dg.instance_for_test() as instance:
        set_paused(db, "handbook", True)
        assert tick(instance).run_requests == []
        assert table(db, "SELECT * FROM source_objects") == []
        set_paused(db, "handbook", False)
        assert len(tick(instance).run_requests) == 1


def test_two_tenants_with_the_same_bucket_content_stay_isolated(kb, database, db, s3_env):
    client, bucket, _ = kb
    # a tenant's location is its own (sources/locations.py): the same files, under globex's own prefix
    for item in client.list_objects_v2(Bucket=bucket, Prefix="kb/")["Contents"]:
        client.copy_object(Bucket=bucket, Key="globex/" + item["Key"],
                           CopySource={"Bucket": bucket, "Key": item["Key"]})
    add_source(db, f"s3://{bucket}/globex/kb/", tenant_id="globex", name="globex-kb", endpoint_url=s3_env)
    with dg.instance_for_test() as instance:
        result = tick(instance)
        assert len(result.run_requests) == 2  # one batch per source
        assert {r.tags["ingestion/source"] for r in result.run_requests} == {"handbook", "globex-kb"}
        run_all(instance, result)
        client.delete_object(Bucket=bucket, Key="globex/kb/launch.md")
    with dg.instance_for_test() as instance:
        # only globex syncs again: acme keeps serving launch.md
        sync_sources(database, load_settings(), S3Clients(S3Resource()), UploadStoreResource().metrics(),
                            names=["globex-kb"])
    acme = search(db, database, "acme", "Project Heron Lisbon")
    globex = search(db, database, "globex", "Project Heron Lisbon")
    assert any("Lisbon" in h.text for h in acme)
    assert all("Lisbon" not in h.text for h in globex)
    per_tenant = table(
        db, "SELECT tenant_id, count(*) AS n FROM document_versions WHERE is_active GROUP BY 1 ORDER BY 1"
    )
    assert per_tenant == [{"tenant_id": "acme", "n": 3}, {"tenant_id": "globex", "n": 2}]


def test_version_race_last_to_complete_is_active(kb, database, db, monkeypatch):
    """Two versions of one key in flight: exactly one active version at every moment; the last promoted wins."""
    client, bucket, _ = kb
    with dg.instance_for_test() as instance:
        run_all(instance, tick(instance))
        put(client, bucket, "kb/launch.md", "# Launch\n\nVersion B of the launch plan.\n")
        first = tick(instance)
        put(client, bucket, "kb/launch.md", "# Launch\n\nVersion C of the launch plan.\n")
        second = tick(instance)
        [key_b] = [r.partition_key for r in first.run_requests]
        [key_c] = [r.partition_key for r in second.run_requests if r.partition_key != key_b]
        stop = threading.Event()
        violations = []

        def watch():
            with connect(database.url) as conn:
                while not stop.is_set():
                    n = conn.execute("""SELECT count(*) AS n FROM document_versions v JOIN documents d USING (doc_id)
                                         WHERE d.source_uri LIKE '%%launch.md' AND v.is_active""").fetchone()["n"]
                    if n != 1:
                        violations.append(n)
                    time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            # C's object is current in S3, so B's fetch (IfMatch on B's ETag) fails cleanly ...
            materialize_batch(instance, key_b)
            materialize_batch(instance, key_c)
        finally:
            stop.set()
            watcher.join()
    assert violations == []
    runs = table(db, "SELECT status, error FROM ingestion_runs WHERE source_key = 'kb/launch.md' ORDER BY file_id")
    assert runs[1]["status"] == "failed" and "changed after it was listed" in runs[1]["error"]
    assert runs[2]["status"] == "succeeded"
    active = table(db, """SELECT c.text FROM chunks c JOIN document_versions v USING (version_id)
                           JOIN documents d ON d.doc_id = v.doc_id
                           WHERE v.is_active AND d.source_uri LIKE '%%launch.md'""")
    assert "Version C" in active[0]["text"]


def test_s3_throttling_is_retried_with_backoff(kb, db, monkeypatch):
    """A 503 SlowDown while fetching an object is transient: the file is retried after a backoff, its
    batch relaunched, and the object fetched again."""
    from botocore.exceptions import ClientError

    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0,0")
    original = S3Clients.__call__
    throttled = []

    class Throttling:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            return getattr(self._client, name)

        def get_object(self, **kwargs):
            if kwargs["Key"].endswith("travel.txt") and not throttled:
                throttled.append(kwargs["Key"])
                raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                                   "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject")
            return self._client.get_object(**kwargs)

    monkeypatch.setattr(S3Clients, "__call__", lambda self, endpoint: Throttling(original(self, endpoint)))
    with dg.instance_for_test() as instance:
        first = tick(instance)
        run_all(instance, first)
        travel = table(db, "SELECT * FROM ingestion_runs WHERE source_key = 'kb/travel.txt'")[0]
        assert (travel["status"], travel["error_code"], travel["attempts"]) == ("queued", "s3_unavailable", 1)
        assert table(db, "SELECT status FROM source_objects WHERE key = 'kb/travel.txt'")[0]["status"] == "queued"
        relaunch = tick(instance)
        assert [r.run_key for r in relaunch.run_requests] == [f"{first.run_requests[0].run_key}:r1"]
        run_all(instance, relaunch)
    travel = table(db, "SELECT * FROM ingestion_runs WHERE source_key = 'kb/travel.txt'")[0]
    assert (travel["status"], travel["attempts"]) == ("succeeded", 2) and throttled == ["kb/travel.txt"]
    assert table(db, "SELECT status FROM source_objects WHERE key = 'kb/travel.txt'")[0]["status"] == "active"


@pytest.mark.integration
def test_an_extractor_change_reextracts_from_the_unchanged_object(kb, database, db, monkeypatch):
    """The stored elements came from an older extractor and the raw file is gone: a version from an S3 source
    whose object is still the same is fetched and extracted again; one whose object changed is not."""
    from ingestion_pipeline.documents import reindex
    from ingestion_pipeline.documents.steps import runner as pipeline_module
    from ingestion_pipeline_tests.helpers import batch_queued

    client, bucket, _source = kb
    with dg.instance_for_test() as instance:
        run_all(instance, tick(instance))
        before = {v["version_id"]: v for v in table(db, "SELECT * FROM document_versions WHERE is_active")}
        assert len(before) == 3
        # the extractor changed since these versions were made
        for module in (reindex, pipeline_module):
            monkeypatch.setattr(module, "EXTRACTOR_VERSION", "direct-3")
        with database.transaction() as conn:
            plan = reindex.queue(conn, reindex.find_versions(conn, pipeline_for(database).fingerprint_for))
        assert len(plan.reindexable) == 3 and all(v.from_s3 for v in plan.reindexable)
        [key] = batch_queued(database)
        result = materialize_batch(instance, key)
        assert result.success

        runs = table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex'")
        assert {r["status"] for r in runs} == {"succeeded"}, [r["error"] for r in runs]
        assert all(r["stats"]["timings_ms"].get("extract") is not None for r in runs)  # extracted again
        after = table(db, "SELECT * FROM document_versions WHERE is_active")
        assert {v["extractor_version"] for v in after} == {"direct-3"} and len(after) == 3
        assert {v["content_hash"] for v in after} == {v["content_hash"] for v in before.values()}
        assert all(table(db, "SELECT count(*) AS n FROM version_elements WHERE version_id = %s",
                         v["version_id"])[0]["n"] > 0 for v in after)

        # an object that changed after its version was made is not fetched: the next sync makes its version
        monkeypatch.setattr(reindex, "EXTRACTOR_VERSION", "direct-4")
        monkeypatch.setattr(pipeline_module, "EXTRACTOR_VERSION", "direct-4")
        changed = sorted(DOCS)[0]
        put(client, bucket, changed, DOCS[changed] + "\n\nEdited.\n")
        sync_sources(database, load_settings(), S3Clients(S3Resource()), UploadStoreResource().metrics(),
                     max_pages=None)
        with database.transaction() as conn:
            plan = reindex.find_versions(conn, pipeline_for(database).fingerprint_for)
        assert len(plan.reindexable) == 2 and len(plan.needs_file) == 1
        assert "submit the file again" in plan.needs_file[0].reason


def test_objects_are_fetched_concurrently_and_a_deleted_one_fails_alone(kb, db, monkeypatch):
    """The fetch step downloads a batch's objects a few at a time; each object's error stays its own."""
    client, bucket, _source = kb
    for i in range(8):
        put(client, bucket, f"kb/extra-{i}.md", f"# Extra {i}\n\nExtra note {i} about the harbour.\n")
    original = S3Clients.__call__
    lock, in_flight, peak, fetched = threading.Lock(), [0], [0], []

    class Slow:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            return getattr(self._client, name)

        def get_object(self, **kwargs):
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            try:
                time.sleep(0.2)  # a real bucket's latency
                fetched.append(kwargs["Key"])
                return self._client.get_object(**kwargs)
            finally:
                with lock:
                    in_flight[0] -= 1

    monkeypatch.setattr(S3Clients, "__call__", lambda self, endpoint: Slow(original(self, endpoint)))
    with dg.instance_for_test() as instance:
        first = tick(instance)
        client.delete_object(Bucket=bucket, Key="kb/extra-5.md")  # gone after it was listed
        run_all(instance, first)
    rows = {r["source_key"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert len(rows) == 11 and peak[0] > 1 and len(fetched) == 11
    gone = rows.pop("kb/extra-5.md")
    assert (gone["status"], gone["error_code"]) == ("failed", "s3_object_deleted")
    assert {r["status"] for r in rows.values()} == {"succeeded"}
