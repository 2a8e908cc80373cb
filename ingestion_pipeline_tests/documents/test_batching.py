import re

from ingestion_pipeline.core.settings import BatchSettings
from ingestion_pipeline.documents.batching import partition_key_for, partitions_with_queued_rows, plan_batches
from ingestion_pipeline_tests.helpers import batch_queued, submit


def test_plan_batches_respects_count_bytes_and_tenant():
    rows = [{"file_id": i, "tenant_id": "a" if i < 7 else "b", "size_bytes": 10} for i in range(10)]
    groups = plan_batches(rows, BatchSettings(max_files=3, max_bytes=25))
    assert [[r["file_id"] for r in g] for g in groups] == [[0, 1], [2, 3], [4, 5], [6], [7, 8], [9]]
    huge = [{"file_id": 1, "tenant_id": "a", "size_bytes": 999}]
    assert len(plan_batches(huge, BatchSettings(max_files=3, max_bytes=25))) == 1


def test_partition_keys_are_safe():
    key = partition_key_for("Acme.Corp/EU", 42)
    assert re.fullmatch(r"[a-z0-9_-]+", key)
    assert key.endswith("-42")


def test_two_hundred_files_become_a_handful_of_batches(database, db, tmp_path):
    paths = []
    for i in range(200):
        p = tmp_path / f"note-{i:03d}.txt"
        p.write_text(f"Note number {i}. It says something unique: token{i}.")
        paths.append(p)
    results = submit(database, "acme", *paths)
    assert {r.status for r in results} == {"queued"}
    keys = batch_queued(database, BatchSettings(max_files=50, max_bytes=10 * 1024 * 1024))
    assert len(keys) == 4
    assert batch_queued(database) == []  # a repeated assignment claims nothing twice
    sizes = db.execute(
        "SELECT partition_key, count(*) AS n FROM ingestion_runs GROUP BY partition_key ORDER BY 1"
    ).fetchall()
    assert sorted(r["n"] for r in sizes) == [50, 50, 50, 50]
    assert sorted(partitions_with_queued_rows(db)) == sorted(keys)
