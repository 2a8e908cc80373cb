"""What a failed file leaves behind, and for how long (docs/operations.md)."""

from ingestion_pipeline_tests.helpers import table


def test_the_staged_work_of_a_failed_file_goes_with_its_bytes(database, db, tmp_path):
    """A failed file's staging row (and what hangs from it) is removed by the retention job's rule once the
    failure is older than INGESTION_FAILED_TTL_DAYS; a recent failure keeps it, for a replay to resume."""
    from ingestion_pipeline.documents import staging
    from ingestion_pipeline_tests.helpers import submit

    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA note.\n")
    [row] = submit(database, "acme", note)
    file_id = row.file_id
    with database.transaction() as conn:
        staging.ensure_staging_row(conn, file_id, "acme")
        conn.execute("UPDATE ingestion_runs SET status = 'failed', finished_at = now() - interval '1 day' "
                     "WHERE file_id = %s", (file_id,))
        assert staging.remove_expired(conn, older_than_days=7) == 0
        conn.execute("UPDATE ingestion_runs SET finished_at = now() - interval '8 days' WHERE file_id = %s",
                     (file_id,))
        assert staging.remove_expired(conn, older_than_days=7) == 1
    assert table(db, "SELECT * FROM staging_documents") == []
