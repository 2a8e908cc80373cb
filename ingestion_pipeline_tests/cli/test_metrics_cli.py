"""The metrics commands end to end, through the project's Dagster instance; and a metrics S3 source."""

import pytest

from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


@pytest.mark.integration
def test_metrics_submit_process_uploads_errors_events(database_url, project_dagster_home, db, tmp_path):
    good = write_export(tmp_path / "meta.csv", "meta", with_invalid_share(daily_rows(2, 2, 5, 5), 0.05))
    bad = tmp_path / "google.json"
    bad.write_text('[{"Ad ID": "1", "Day": "2024-03-01"},\n{"Ad ID": "2", "Da')
    [submitted] = json_lines(run_cli("metrics", "submit", str(good), "--workspace", "acme", "--platform", "meta",
                                     "--client", "c-1", "--json").stdout)
    assert submitted["status"] == "pending"
    run_cli("metrics", "submit", str(bad), "--workspace", "acme", "--platform", "google")
    [dup] = json_lines(run_cli("metrics", "submit", str(good), "--workspace", "acme", "--platform", "meta",
                               "--json").stdout)
    assert dup["status"] == "duplicate" and dup["duplicate_of"] == submitted["upload_id"]
    rejected = run_cli("metrics", "submit", str(tmp_path / "meta.csv"), "--workspace", "acme", "--platform",
                       "myspace", check=False)
    assert rejected.returncode == 2 and "invalid choice: 'myspace'" in rejected.stderr

    processed = json_lines(run_cli("process", "--json").stdout)
    outcomes = {p["metric_upload"]["upload_id"]: p["metric_upload"] for p in processed if "metric_upload" in p}
    assert outcomes[submitted["upload_id"]]["status"] == "completed"
    failed = next(o for o in outcomes.values() if o["upload_id"] != submitted["upload_id"])
    assert failed["status"] == "failed" and "line 2: truncated or invalid JSON" in failed["error"]

    uploads = {u["upload_id"]: u for u in json_lines(run_cli("metrics", "uploads", "--workspace", "acme",
                                                             "--json").stdout)}
    assert uploads[submitted["upload_id"]]["invalid_rows"] == 5
    errors = json_lines(run_cli("metrics", "errors", str(submitted["upload_id"]), "--json").stdout)
    assert len(errors) == 5 and all(e["validation_errors"] for e in errors)
    text = run_cli("metrics", "errors", str(submitted["upload_id"])).stdout
    assert "spend: negative (-12.50)" in text
    [event] = json_lines(run_cli("events", "--workspace", "acme", "--json").stdout)
    assert event["upload_id"] == submitted["upload_id"] and event["event_type"] == "upload.completed"
    assert event["payload"]["client_id"] == "c-1"


@pytest.mark.integration
def test_metrics_s3_source(database_url, project_dagster_home, db, tmp_path, bucket, s3_env):
    client, name = bucket
    export = write_export(tmp_path / "day1.jsonl", "tiktok", daily_rows(1, 2, 2, 3))
    client.upload_file(str(export), name, "exports/day1.jsonl")
    client.put_object(Bucket=name, Key="exports/readme.pdf", Body=b"%PDF")
    missing_platform = run_cli("source", "add", f"s3://{name}/exports/", "--tenant", "acme", "--kind", "metrics",
                               check=False)
    assert missing_platform.returncode == 2 and "needs --platform" in missing_platform.stderr
    run_cli("source", "add", f"s3://{name}/exports/", "--tenant", "acme", "--name", "tiktok-exports", "--kind",
            "metrics", "--platform", "tiktok", "--endpoint-url", s3_env)
    report = json_lines(run_cli("sync", "tiktok-exports", "--wait", "--json").stdout)[0]["sync"]
    assert (report["new"], report["skipped"]) == (1, 1)
    [upload] = table(db, "SELECT * FROM data_uploads")
    assert (upload["status"], upload["platform"], upload["source_key"]) == ("completed", "tiktok", "exports/day1.jsonl")
    assert table(db, "SELECT count(*) AS n FROM daily_metrics")[0]["n"] == 12
    again = json_lines(run_cli("sync", "tiktok-exports", "--wait", "--json").stdout)[0]["sync"]
    assert again["unchanged"] == 2 and len(table(db, "SELECT * FROM data_uploads")) == 1
