"""Pathological metric JSON is bad data: it fails once, as ``malformed_file``, with a message a person can act
on. Before, a 100,000-deep value and a 100,000-digit integer escaped as a raw ``RecursionError`` /
``ValueError``, failed the run, and were retried as transient until dead-lettered (~48 s, four attempts)."""

import time

import dagster as dg
import pytest

from ingestion_pipeline_tests.defs.test_metric_assets import run_upload, submit
from ingestion_pipeline_tests.helpers import table

DEPTH = 100_000
CASES = {
    "deep-array.json": ("[" * DEPTH + "]" * DEPTH, "nested deeper than"),
    "deep-object.jsonl": ('{"a":' * DEPTH + "1" + "}" * DEPTH + "\n", "nested deeper than"),
    "deep-record.json": ('[{"campaign_id": "c1", "x": ' + "[" * DEPTH + "]" * DEPTH + "}]", "nested deeper than"),
    "digits.json": ('[{"campaign_id": "c1", "impressions": ' + "9" * DEPTH + "}]", "longer than 30 digits"),
    "digits.jsonl": ('{"campaign_id": "c1", "impressions": -' + "9" * DEPTH + "}\n", "longer than 30 digits"),
}


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.mark.parametrize("name", sorted(CASES))
def test_pathological_json_fails_once_as_a_malformed_file(name, instance, database, db, tmp_path):
    content, reason = CASES[name]
    path = tmp_path / name
    path.write_text(content)
    submitted = submit(database, tmp_path, path)
    started = time.monotonic()
    if submitted.status == "pending":
        result = run_upload(instance, submitted.partition_key)
        assert not result.success
        [upload] = table(db, "SELECT * FROM data_uploads WHERE upload_id = %s", submitted.upload_id)
        assert (upload["status"], upload["error_code"], upload["attempts"]) == ("failed", "malformed_file", 1)
        assert reason in upload["error"], upload["error"]
        events = [r["event"] for r in table(
            db, "SELECT event FROM ledger_history WHERE kind = 'metric_upload' AND item_id = %s ORDER BY history_id",
            submitted.upload_id)]
        assert events == ["claimed", "failed"]  # no retry_scheduled: it is not transient
    else:  # refused at submit: the same clear reason, nothing stored
        assert submitted.status == "rejected" and reason in submitted.reason, submitted
    assert time.monotonic() - started < 60  # generous: it takes well under a second


@pytest.mark.parametrize("name", ["deep-array.json", "digits.jsonl"])
def test_pathological_json_without_a_platform_is_refused_at_submit_with_the_reason(name, database, tmp_path):
    """Detecting the platform reads the first records: the same bounds hold there, before anything is queued."""
    content, reason = CASES[name]
    path = tmp_path / name
    path.write_text(content)
    submitted = submit(database, tmp_path, path, platform=None)
    assert submitted.status == "rejected" and reason in submitted.reason, submitted
