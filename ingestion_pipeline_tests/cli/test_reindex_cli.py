"""`ingestion-pipeline reindex` as a person runs it after changing a chunker setting: dry run, queue and
process, then a no-op that says so."""

import pytest

from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reindex_after_a_chunker_change(database_url, project_dagster_home, db, corpus_dir, monkeypatch):
    docs = corpus_dir / "documents"
    run_cli("ingest", str(docs / "codeblock.md"), str(docs / "simple.docx"), "--tenant", "acme")
    run_cli("ingest", str(docs / "fake-memo.pdf"), "--tenant", "beta")
    [unchanged] = json_lines(run_cli("reindex", "--json").stdout)
    assert unchanged["reindex"]["current"] == 3 and unchanged["reindex"]["reindexable"] == 0
    assert "nothing to re-index (every active version is current)" in run_cli("reindex").stdout

    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "60")
    [dry] = json_lines(run_cli("reindex", "--tenant", "acme", "--dry-run", "--json").stdout)
    assert dry["reindex"]["reindexable"] == 2 and dry["reindex"]["queued"] == 0
    assert {v["status"] for v in dry["versions"]} == {"would re-index"}
    assert table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex'") == []

    done = run_cli("reindex", "--tenant", "acme", "--process")
    assert "2 to re-index, 2 queued now, 0 already queued" in done.stdout
    assert "2 file(s), 2 succeeded" in done.stdout, done.stdout
    active = table(db, "SELECT tenant_id, version_number, pipeline_fingerprint FROM document_versions WHERE is_active")
    assert sorted((v["tenant_id"], v["version_number"]) for v in active) == [("acme", 2), ("acme", 2), ("beta", 1)]
    assert len({v["pipeline_fingerprint"] for v in active if v["tenant_id"] == "acme"}) == 1

    again = run_cli("reindex", "--tenant", "acme")
    assert "2 current" in again.stdout and "nothing to re-index" in again.stdout
    [everyone] = json_lines(run_cli("reindex", "--dry-run", "--json").stdout)  # beta's is stale now
    assert everyone["reindex"]["reindexable"] == 1 and everyone["versions"][0]["tenant_id"] == "beta"
