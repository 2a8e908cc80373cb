"""The check that keeps asynchronously committed staging batches honest (``metrics/staging.verify_staged``):
each batch and ``staging_complete`` first ask whether the upload's last staged row is the one the attempt
wrote last. The crash that makes it fire is in ``faults/test_postgres_restart.py``; here, its answers."""

from __future__ import annotations

import psycopg
import pytest

from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.metrics.staging import StagedRowsLost, verify_staged


def _staged(db: psycopg.Connection, rows: int) -> int:
    upload = db.execute(
        """INSERT INTO data_uploads (workspace_id, platform, filename, file_format, content_hash, size_bytes, status)
           VALUES ('w', 'meta', 'x.csv', 'csv', gen_random_uuid()::text, 1, 'processing') RETURNING upload_id""",
    ).fetchone()["upload_id"]
    for index in range(1, rows + 1):
        db.execute("""INSERT INTO staging_rows (upload_id, row_index, raw_data, validation_status)
                      VALUES (%s, %s, '[]', 'valid')""", (upload, index))
    return upload


def test_the_last_row_written_passes(db):
    verify_staged(db, _staged(db, 3), 3)
    verify_staged(db, _staged(db, 0), 0)  # nothing staged yet, nothing expected


def test_rows_a_crash_took_fail_the_attempt_and_name_the_rows_to_stage_again(db):
    upload = _staged(db, 2)
    with pytest.raises(StagedRowsLost) as lost:
        verify_staged(db, upload, 5)
    assert isinstance(lost.value, TransientError)  # Dagster's step retry takes it from there
    assert str(lost.value).endswith(
        f"upload {upload}: rows 3-5 were committed but are no longer staged (the database restarted before "
        "they reached disk); the retry stages them again from row 3")


def test_rows_this_attempt_did_not_write_are_named_as_such(db):
    upload = _staged(db, 4)
    with pytest.raises(StagedRowsLost) as extra:
        verify_staged(db, upload, 2)
    assert str(extra.value).endswith(
        f"upload {upload}: rows 3-4 are staged but this attempt did not write them; the retry resumes after row 4")
