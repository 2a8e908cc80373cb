"""The chunk step reads, chunks and writes its files in groups, and still fails only a file at fault."""

import psycopg
import pytest

from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.documents import staging
from ingestion_pipeline.documents.steps import chunk as pipeline_module
from ingestion_pipeline_tests.helpers import batch_queued, pipeline_for, submit, table


@pytest.fixture
def notes(tmp_path):
    paths = []
    for i in range(12):
        path = tmp_path / f"note-{i:02d}.md"
        path.write_text(f"# Note {i}\n\n" + " ".join(f"Sentence {j} of note {i}." for j in range(i + 1)) + "\n")
        paths.append(path)
    return paths


def _extracted(database, notes):
    submit(database, "acme", *notes)
    [key] = batch_queued(database)
    pipeline = pipeline_for(database)
    pipeline.worker = Worker("run-c", "run-c", 600)
    pipeline.claim_batch(key)
    pipeline.extract_batch(key)
    return pipeline, key


def test_files_are_written_a_group_at_a_time_in_the_batchs_order(database, db, notes, monkeypatch):
    pipeline, key = _extracted(database, notes)
    writes: list[list[int]] = []
    original = staging.write_chunks
    monkeypatch.setattr(staging, "write_chunks",
                        lambda conn, files: writes.append(list(files)) or original(conn, files))
    monkeypatch.setattr(pipeline_module, "CHUNK_GROUP_FILES", 5)
    chunk_elements = pipeline_module.chunk_elements
    monkeypatch.setattr(pipeline_module, "chunk_elements",  # note 5 makes no chunks: it fails, alone
                        lambda elements, *a, **k: [] if "Note 5" in elements[0].text
                        else chunk_elements(elements, *a, **k))

    outcomes = pipeline.chunk_batch(key)

    file_ids = [r["file_id"] for r in table(db, "SELECT file_id FROM ingestion_runs ORDER BY file_id")]
    assert [o.file_id for o in outcomes] == file_ids
    by_name = {o.filename: o for o in outcomes}
    assert by_name["note-05.md"].status in ("retry", "failed", "dead_letter")  # no chunks: that file alone
    assert {o.status for name, o in by_name.items() if name != "note-05.md"} == {"running"}
    assert len(writes) == 3 and sorted(i for w in writes for i in w) == sorted(
        o.file_id for o in outcomes if o.status == "running")  # 12 files in groups of 5: three transactions
    done = table(db, "SELECT file_id, stats FROM staging_documents WHERE chunks_done ORDER BY file_id")
    assert len(done) == 11 and all(r["stats"]["chunks"] >= 1 for r in done)
    ledger = {r["file_id"]: r["stats"] for r in table(db, "SELECT file_id, stats FROM ingestion_runs")}
    assert all("chunk" in ledger[r["file_id"]]["timings_ms"] for r in done)

    again = pipeline.chunk_batch(key)  # a retried step finds them staged
    assert {o.detail for o in again if o.status == "running"} == {"chunks already staged"}


def test_a_group_whose_write_fails_on_one_files_data_is_written_file_by_file(database, db, notes, monkeypatch):
    pipeline, key = _extracted(database, notes[:4])
    [bad] = [r["file_id"] for r in table(
        db, "SELECT file_id FROM ingestion_runs WHERE config->>'filename' = 'note-02.md'")]
    original = staging.write_chunks

    def refuse_the_bad_file(conn, files):
        if bad in files:
            raise psycopg.errors.CharacterNotInRepertoire("invalid byte sequence for encoding \"UTF8\": 0x00")
        return original(conn, files)

    monkeypatch.setattr(staging, "write_chunks", refuse_the_bad_file)
    outcomes = {o.filename: o for o in pipeline.chunk_batch(key)}

    assert outcomes["note-02.md"].status in ("retry", "failed", "dead_letter")
    assert {outcomes[n].status for n in ("note-00.md", "note-01.md", "note-03.md")} == {"running"}
    assert table(db, "SELECT count(*) AS n FROM staging_documents WHERE chunks_done")[0]["n"] == 3


def test_groups_are_cut_by_files_and_by_bytes_in_order():
    from ingestion_pipeline.documents.steps.chunk import CHUNK_GROUP_BYTES, CHUNK_GROUP_FILES, chunk_groups

    small = [{"file_id": i, "size_bytes": 2_000} for i in range(CHUNK_GROUP_FILES * 2 + 3)]
    assert [len(g) for g in chunk_groups(small)] == [CHUNK_GROUP_FILES, CHUNK_GROUP_FILES, 3]
    big = CHUNK_GROUP_BYTES // 2 + 1
    rows = [{"file_id": 1, "size_bytes": big}, {"file_id": 2, "size_bytes": big}, {"file_id": 3, "size_bytes": 10},
            {"file_id": 4, "size_bytes": CHUNK_GROUP_BYTES * 3}, {"file_id": 5, "size_bytes": None}]
    assert [[r["file_id"] for r in g] for g in chunk_groups(rows)] == [[1], [2, 3], [4], [5]]
    assert chunk_groups([]) == []


def test_a_file_another_run_took_over_is_lost_and_nothing_is_staged_for_it(database, db, notes, monkeypatch):
    pipeline, key = _extracted(database, notes[:4])
    [taken] = [r["file_id"] for r in table(
        db, "SELECT file_id FROM ingestion_runs WHERE config->>'filename' = 'note-01.md'")]
    rows = table(db, "SELECT * FROM ingestion_runs WHERE partition_key = %s ORDER BY file_id", key)
    original = pipeline_module.file_ledger.hold_many

    def another_run_takes_it_first(conn, file_ids, owner):  # between the group's chunking and its write
        with database.connection() as other:
            other.execute("UPDATE ingestion_runs SET owner = 'run-other' WHERE file_id = %s", (taken,))
        return original(conn, file_ids, owner)

    monkeypatch.setattr(pipeline_module.file_ledger, "hold_many", another_run_takes_it_first)
    outcomes = {o.filename: o for o in pipeline_module.chunk_group(pipeline, rows)}

    assert outcomes["note-01.md"].status == "lost" and "run-other" in outcomes["note-01.md"].detail
    assert {outcomes[n].status for n in ("note-00.md", "note-02.md", "note-03.md")} == {"running"}
    assert table(db, "SELECT count(*) AS n FROM staging_chunks WHERE file_id = %s", taken)[0]["n"] == 0
    assert table(db, "SELECT chunks_done FROM staging_documents WHERE file_id = %s", taken) == [{"chunks_done": False}]
