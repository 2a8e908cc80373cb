"""The `source` and `sync` commands against a moto S3 server, through the project's Dagster instance."""

import pytest

from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


@pytest.mark.integration
def test_source_commands_and_sync_wait(database_url, project_dagster_home, db, bucket, s3_env):
    client, name = bucket
    client.put_object(Bucket=name, Key="docs/a.md", Body=b"# Alpha\n\nAlpha team owns the billing service.\n")
    client.put_object(Bucket=name, Key="docs/b.txt", Body=b"Beta team owns search.\n")
    added = json_lines(run_cli("source", "add", f"s3://{name}/docs/", "--tenant", "acme", "--name", "docs", "--json",
                               "--endpoint-url", s3_env).stdout)[0]
    assert added == {"added": "docs", "uri": f"s3://{name}/docs/", "tenant_id": "acme", "kind": "documents",
                     "endpoint_url": s3_env}
    duplicate = run_cli("source", "add", f"s3://{name}/docs/", "--tenant", "acme", "--name", "docs", check=False)
    assert duplicate.returncode == 2 and "already exists" in duplicate.stderr
    bad = run_cli("source", "add", "http://not-s3", "--tenant", "acme", check=False)
    assert bad.returncode == 2 and "not an S3 location" in bad.stderr

    synced = run_cli("sync", "docs", "--wait", "--json")
    report = json_lines(synced.stdout)[0]["sync"]
    assert report["new"] == 2 and report["pass_completed"]
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"succeeded"}

    [listed] = json_lines(run_cli("source", "list", "--json").stdout)
    assert listed["active_objects"] == 2 and listed["paused"] is False

    assert json_lines(run_cli("source", "pause", "docs", "--json").stdout)[0] == {"source": "docs", "paused": True}
    paused = run_cli("sync", "docs", check=False)
    assert paused.returncode == 2 and "paused" in paused.stderr
    run_cli("source", "resume", "docs")
    again = json_lines(run_cli("sync", "docs", "--wait", "--json").stdout)[0]["sync"]
    assert again["unchanged"] == 2 and again["new"] == again["changed"] == 0

    run_cli("source", "remove", "docs")
    assert "(none)" in run_cli("source", "list").stdout
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == 2  # removal deletes nothing

