"""`process` starts loading the model before it sets up Dagster when a document waits, and only then; with
nothing queued or claimed it does not start Dagster at all."""

import argparse

import pytest

import ingestion_pipeline.runtime.launching as launching
from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.documents import process_queued
from ingestion_pipeline.documents.intake import submit_upload
from ingestion_pipeline_tests.helpers import table


def _process_recording(ctx, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``process_queued``; what happened, in order: the model's warm-up asked for, the runs started."""
    events: list[str] = []
    warm_up, run = ctx.embedder.warm_up, launching.run_queued_in_process
    monkeypatch.setattr(ctx.embedder, "warm_up", lambda: (events.append("warm-up"), warm_up())[1])
    monkeypatch.setattr(launching, "run_queued_in_process", lambda *a, **kw: (events.append("runs"), run(*a, **kw))[1])
    process_queued(ctx, argparse.Namespace(json=True))
    return events


def test_the_model_warms_up_before_dagster_when_a_document_waits(database_url, project_dagster_home, db, tmp_path,
                                                                 monkeypatch):
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe model loads while Dagster starts.\n")
    with bootstrap() as ctx:
        submit_upload(ctx.db, ctx.document_store, tenant_id="acme", path=note, fingerprint=ctx.fingerprint,
                      max_bytes=ctx.settings.upload.max_bytes)
        events = _process_recording(ctx, monkeypatch)
    assert events[:2] == ["warm-up", "runs"]
    assert table(db, "SELECT status FROM ingestion_runs") == [{"status": "succeeded"}]


def test_no_warm_up_when_no_document_is_due(database_url, project_dagster_home, db, tmp_path, monkeypatch):
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nIts tenant is paused.\n")
    with bootstrap() as ctx:
        assert _process_recording(ctx, monkeypatch) == []  # nothing queued: no model, no Dagster
        submit_upload(ctx.db, ctx.document_store, tenant_id="acme", path=note, fingerprint=ctx.fingerprint,
                      max_bytes=ctx.settings.upload.max_bytes)
        db.execute("UPDATE tenants SET paused = true WHERE tenant_id = 'acme'")
        assert _process_recording(ctx, monkeypatch) == ["runs"]  # a paused tenant's file is not due
    assert table(db, "SELECT status FROM ingestion_runs") == [{"status": "queued"}]


@pytest.mark.integration
def test_with_nothing_queued_or_claimed_process_does_not_import_dagster(database_url, project_dagster_home, db,
                                                                        tmp_path):
    """An unchanged re-ingest spent ~4 s importing Dagster and building its instance to find nothing to do."""
    import os
    import subprocess
    import sys

    from ingestion_pipeline_tests.cli.test_corpus_cli import CLI

    def process_imports() -> tuple[str, str]:
        result = subprocess.run([sys.executable, "-X", "importtime", *CLI, "process"], capture_output=True, text=True,
                                env=os.environ.copy(), timeout=300, check=True)
        return result.stdout, result.stderr

    stdout, imports = process_imports()
    assert "nothing queued" in stdout and " dagster\n" not in imports

    note = tmp_path / "note.md"
    note.write_text("# Note\n\nIts tenant is paused.\n")
    with bootstrap() as ctx:
        submit_upload(ctx.db, ctx.document_store, tenant_id="acme", path=note, fingerprint=ctx.fingerprint,
                      max_bytes=ctx.settings.upload.max_bytes)
    db.execute("UPDATE tenants SET paused = true WHERE tenant_id = 'acme'")
    stdout, imports = process_imports()  # queued, though not due: Dagster starts (the janitor looks at it)
    assert "nothing queued" in stdout and " dagster\n" in imports
