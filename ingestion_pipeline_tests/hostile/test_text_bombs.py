"""Office files within the byte limits that unpack to far more text than a file should hold fail as
``file_too_much_text`` in the extraction worker, before any of it reaches the main process; each format keeps
its own error code; the rest of the batch is unharmed. Before: a 2.7 MB DOCX (199 MB of XML) made 411,208 chunks
in the main `process` (8.2 GB RSS), and an XLSX bomb was reported as ``docx_too_large``.

The limits are lowered here (1,000,000 characters) so the files stay small; the mechanism is the one that
holds the default of 20,000,000."""

from __future__ import annotations

import os
import time
import zipfile

import pytest

from ingestion_pipeline.samples.text_bombs import docx_with_text, paragraphs, xlsx_with_text
from ingestion_pipeline_tests.cli.test_corpus_cli import CLI
from ingestion_pipeline_tests.helpers import run_measuring_peak, table


@pytest.mark.slow
def test_office_text_bombs_fail_in_the_worker_and_the_batch_goes_on(database, project_dagster_home, db, tmp_path):
    files = [docx_with_text(tmp_path / "words.docx", 1_500_000), xlsx_with_text(tmp_path / "cells.xlsx", 1_500_000)]
    (tmp_path / "fine.md").write_text("# Fine\n\nThe ferry leaves at seven.\n")
    env = {**os.environ, "INGESTION_MAX_TEXT_CHARS": "1000000"}
    started = time.monotonic()
    _, peak_mb = run_measuring_peak(CLI + ["ingest", *map(str, files), str(tmp_path / "fine.md"), "--tenant", "acme"],
                                    env)  # the command and the processes it waited for (the extraction workers)
    seconds = time.monotonic() - started
    rows = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    for name in ("words.docx", "cells.xlsx"):
        row = rows[name]
        assert (row["status"], row["error_code"], row["attempts"]) == ("failed", "file_too_much_text", 1), row
        assert "over the limit of 1,000,000 (INGESTION_MAX_TEXT_CHARS raises it)" in row["error"]
    assert rows["fine.md"]["status"] == "succeeded"
    assert table(db, "SELECT * FROM staging_chunks") == []
    assert seconds < 300 and peak_mb < 3000, (seconds, peak_mb)  # generous: ~1 GB is the model


def test_each_office_format_names_its_own_zip_bomb(tmp_path):
    from ingestion_pipeline.core.settings import ExtractionLimits
    from ingestion_pipeline.documents.extraction import extract
    from ingestion_pipeline.documents.extraction.errors import ExtractionError

    for extension in ("docx", "xlsx", "pptx"):
        bomb = tmp_path / f"bomb.{extension}"
        with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as package:
            package.writestr("[Content_Types].xml", "<Types/>")
            with package.open("xl/worksheets/sheet1.xml" if extension == "xlsx" else "part.xml", "w") as member:
                for _ in range(8):
                    member.write(bytes(1 << 20))
        try:
            extract(bomb, f".{extension}", ExtractionLimits(max_member_bytes=4 << 20))
        except ExtractionError as exc:
            assert exc.code == f"{extension}_too_large", (extension, exc.code)
        else:
            raise AssertionError(f"{extension} bomb extracted")


def test_a_file_over_the_chunk_limit_fails_with_the_setting_to_raise(database, db, tmp_path, monkeypatch):
    import dagster as dg

    from ingestion_pipeline_tests.helpers import ingest

    long_note = tmp_path / "long.md"
    long_note.write_text("\n\n".join(f"## Part {i}\n\n" + " ".join(paragraphs(1500, i)) for i in range(40)))
    monkeypatch.setenv("INGESTION_MAX_CHUNKS_PER_FILE", "10")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", long_note)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["error_code"]) == ("failed", "file_too_much_text"), row
    assert "over the limit of 10 chunks" in row["error"] and "INGESTION_MAX_CHUNKS_PER_FILE" in row["error"]


def test_a_file_over_the_token_limit_fails_with_the_setting_to_raise(database, db, tmp_path, monkeypatch):
    import dagster as dg

    from ingestion_pipeline_tests.helpers import ingest

    long_note = tmp_path / "long.md"
    long_note.write_text("\n\n".join(f"## Part {i}\n\n" + " ".join(paragraphs(1500, i)) for i in range(40)))
    monkeypatch.setenv("INGESTION_MAX_TOKENS_PER_FILE", "2000")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", long_note)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["error_code"], row["attempts"]) == ("failed", "file_too_much_text", 1), row
    assert "more than 2,000 tokens" in row["error"] and "INGESTION_MAX_TOKENS_PER_FILE" in row["error"], row
    assert table(db, "SELECT * FROM staging_chunks") == []
