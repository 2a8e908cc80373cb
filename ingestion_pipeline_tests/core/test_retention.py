"""Raw bytes are kept while work may need them, and removed after their time-to-live."""

import os
import time

import dagster as dg

from ingestion_pipeline.core.retention import remove_expired_raw_files, remove_orphans
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline_tests.helpers import process_in_process, submit, table


def test_failed_files_keep_their_bytes_for_the_ttl_then_lose_them(database, db, corpus_dir, isolated_storage):
    [failed] = submit(database, "acme", corpus_dir / "broken" / "password.pdf")
    with dg.instance_for_test() as instance:
        process_in_process(instance, database)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert row["status"] == "failed" and os.path.exists(row["raw_path"])  # kept for inspection and replay
    policy = load_settings().reliability
    assert remove_expired_raw_files(database, policy).expired_files == 0  # within the TTL
    db.execute("UPDATE ingestion_runs SET finished_at = now() - interval '8 days'")
    report = remove_expired_raw_files(database, policy)
    assert report.expired_files == 1 and report.bytes_freed == row["size_bytes"]
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert row["raw_path"] is None and "raw_removed_at" in row["stats"]
    assert not (isolated_storage / "acme" / failed.sha256).exists()


def test_bytes_that_queued_work_needs_are_never_removed(database, db, corpus_dir):
    path = corpus_dir / "broken" / "password.pdf"
    submit(database, "acme", path)
    db.execute("UPDATE ingestion_runs SET status = 'failed', finished_at = now() - interval '8 days'")
    db.execute("""INSERT INTO ingestion_runs (tenant_id, doc_id, status, source_uri, raw_path, content_hash, size_bytes)
                  SELECT tenant_id, doc_id, 'queued', source_uri, raw_path, content_hash, size_bytes
                    FROM ingestion_runs""")  # the same bytes queued again
    assert remove_expired_raw_files(database, load_settings().reliability).expired_files == 0
    assert all(os.path.exists(r["raw_path"]) for r in table(db, "SELECT raw_path FROM ingestion_runs"))


def test_orphans_are_removed_after_a_day(database, db, corpus_dir, isolated_storage):
    [kept] = submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    orphan = isolated_storage / "acme" / ("0" * 64)
    orphan.write_bytes(b"a crashed submit left this")
    incoming = isolated_storage / "acme" / ".incoming-abc"
    incoming.write_bytes(b"half written")
    young = isolated_storage / "acme" / ("1" * 64)
    young.write_bytes(b"just stored, its ledger row is being written")
    day_and_more = time.time() - 25 * 3600
    for path in (orphan, incoming, isolated_storage / "acme" / kept.sha256):
        os.utime(path, (day_and_more, day_and_more))
    report = remove_orphans(database, [LocalUploadStore(isolated_storage)], load_settings().reliability)
    assert report.orphan_files == 2
    assert not orphan.exists() and not incoming.exists()
    assert young.exists() and (isolated_storage / "acme" / kept.sha256).exists()  # referenced by its queued row
