"""The listing sync of an S3 source (sources/sync.py) against a real S3 API (moto on 127.0.0.1): the page
budget across ticks, a crash mid-pass, and two syncs of one source."""

import threading

import pytest

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.sources.registry import add_source, get_source
from ingestion_pipeline.sources.sync import sync_source
from ingestion_pipeline_tests.helpers import put, table


@pytest.mark.integration
def test_five_thousand_keys_are_listed_across_ticks_within_budget(bucket, database, db, s3_env):
    client, name = bucket
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: put(client, name, f"many/k{i:05d}.txt", f"note {i}"), range(5000)))
    source = add_source(db, f"s3://{name}/many/", tenant_id="acme", name="many", endpoint_url=s3_env)
    reports = []
    with connect(database.url) as conn:
        while True:
            current = get_source(conn, "many")
            report = sync_source(database, current, client, max_bytes=10**6, page_size=500, max_pages=3)
            reports.append(report)
            assert report.listed <= 1500 and report.pages <= 3
            if report.pass_completed:
                break
    assert len(reports) == 4  # 5,000 keys / (3 pages x 500) per tick
    assert sum(r.new for r in reports) == 5000
    assert table(db, "SELECT count(*) AS n FROM source_objects WHERE source_id = %s", source.source_id)[0]["n"] == 5000
    assert table(db, "SELECT count(*) AS n FROM ingestion_runs")[0]["n"] == 5000
    # A second pass over the unchanged prefix queues nothing.
    current = get_source(db, "many")
    report = sync_source(database, current, client, max_bytes=10**6, page_size=1000, max_pages=None)
    assert report.pass_completed and report.unchanged == 5000 and report.new == report.changed == 0
    assert table(db, "SELECT count(*) AS n FROM ingestion_runs")[0]["n"] == 5000


def test_a_crash_mid_pass_resumes_without_duplicates(bucket, database, db, s3_env):
    client, name = bucket
    for i in range(30):
        put(client, name, f"p/{i:02d}.md", f"# Doc {i}\n\ntext {i}")
    add_source(db, f"s3://{name}/p/", tenant_id="acme", name="resume", endpoint_url=s3_env)

    class Flaky:
        """Fails the third page: the first two pages and the cursor are committed."""

        def __init__(self):
            self.calls = 0

        def list_objects_v2(self, **kwargs):
            self.calls += 1
            if self.calls == 3:
                raise ConnectionError("network dropped")
            return client.list_objects_v2(**kwargs)

    with pytest.raises(ConnectionError):
        sync_source(database, get_source(db, "resume"), Flaky(), max_bytes=10**6, page_size=10, max_pages=None)
    assert get_source(db, "resume").list_cursor == "p/19.md"
    report = sync_source(database, get_source(db, "resume"), client, max_bytes=10**6, page_size=10,
                         max_pages=None)
    assert report.pass_completed and report.new == 10 and report.deleted == 0
    assert table(db, "SELECT count(*) AS n FROM ingestion_runs")[0]["n"] == 30


def test_two_syncs_of_one_source_never_overlap(kb, database, db):
    client, _, _ = kb
    entered = threading.Event()
    release = threading.Event()

    class Slow:
        def list_objects_v2(self, **kwargs):
            entered.set()
            release.wait(10)
            return client.list_objects_v2(**kwargs)

    source = get_source(db, "handbook")
    first = {}
    t = threading.Thread(target=lambda: first.update(
        r=sync_source(database, source, Slow(), max_bytes=10**6, max_pages=None)))
    t.start()
    assert entered.wait(10)
    second = sync_source(database, source, client, max_bytes=10**6, max_pages=None)
    release.set()
    t.join()
    assert second.busy and second.listed == 0
    assert first["r"].pass_completed and first["r"].new == 3
