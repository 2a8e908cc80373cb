"""Metric uploads through the real assets, the blocking check, promotion and the completion event."""

import json
from datetime import date

import dagster as dg
import pytest

from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.metrics.assets import promoted_metrics, raw_metric_files, staged_metric_rows
from ingestion_pipeline.defs.metrics.cleanup import staging_cleanup_job, staging_cleanup_schedule
from ingestion_pipeline.defs.metrics.sensors import metric_upload_sensor
from ingestion_pipeline.defs.partitions import WORKSPACE_TAG, metric_uploads
from ingestion_pipeline.defs.resources import HeartbeatResource, PostgresResource, SettingsResource
from ingestion_pipeline.metrics.uploads import submit_metric_file
from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export
from ingestion_pipeline_tests.helpers import table

ASSETS = [raw_metric_files, staged_metric_rows, promoted_metrics]


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def submit(database, tmp_path, path, workspace="acme", platform="meta", **kwargs):
    with path.open("rb") as stream:
        return submit_metric_file(database, LocalUploadStore(tmp_path / "metric_store"), workspace_id=workspace,
                                  platform=platform, filename=path.name, stream=stream, max_bytes=50 * 2**20,
                                  **kwargs)


def run_upload(instance, partition_key, tags=None):
    if partition_key not in instance.get_dynamic_partitions(metric_uploads.name):
        instance.add_dynamic_partitions(metric_uploads.name, [partition_key])
    return dg.materialize(ASSETS, partition_key=partition_key, instance=instance, tags=tags,
                          resources={"postgres": PostgresResource(), "heartbeat": HeartbeatResource(),
                                     "settings": SettingsResource()},
                          raise_on_error=False)


def upload_row(db, upload_id):
    return table(db, "SELECT * FROM data_uploads WHERE upload_id = %s", upload_id)[0]


def counts(db):
    return {t: table(db, f"SELECT count(*) AS n FROM {t}")[0]["n"]
            for t in ("campaigns", "ad_sets", "ads", "daily_metrics", "ingestion_events")}


@pytest.mark.parametrize("platform", ["meta", "google", "tiktok"])
@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
def test_clean_export_completes(instance, database, db, tmp_path, platform, fmt):
    path = write_export(tmp_path / f"export.{fmt}", platform, daily_rows(2, 2, 2, 5))
    submitted = submit(database, tmp_path, path, platform=platform)
    assert submitted.status == "pending"
    result = run_upload(instance, submitted.partition_key)
    assert result.success
    upload = upload_row(db, submitted.upload_id)
    assert upload["status"] == "completed" and upload["total_rows"] == 40 and upload["promoted_rows"] == 40
    assert upload["started_at"] <= upload["finished_at"]
    assert counts(db) == {"campaigns": 2, "ad_sets": 4, "ads": 8, "daily_metrics": 40, "ingestion_events": 1}
    [event] = table(db, "SELECT * FROM ingestion_events")
    assert event["event_type"] == "upload.completed"
    assert event["payload"]["rows_by_entity"]["daily_metric"] == 40
    assert event["payload"]["affected_dates"] == [f"2024-03-0{d}" for d in range(1, 6)]


def test_five_percent_invalid_completes_and_reports_rows(instance, database, db, tmp_path):
    path = write_export(tmp_path / "e.csv", "meta", with_invalid_share(daily_rows(2, 2, 5, 10), 0.05))
    submitted = submit(database, tmp_path, path)
    result = run_upload(instance, submitted.partition_key)
    assert result.success
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["total_rows"], upload["invalid_rows"]) == ("completed", 200, 10)
    assert counts(db)["daily_metrics"] == 190
    errors = table(db, "SELECT validation_errors FROM staging_rows WHERE validation_status = 'invalid'")
    reasons = {e["error"] for r in errors for e in r["validation_errors"]}
    assert "negative (-12.50)" in reasons and "missing key" in reasons
    assert any("exceed impressions" in r for r in reasons) and any("not a date" in r for r in reasons)
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["valid_ratio"].value == pytest.approx(0.95)
    assert check.partition == submitted.partition_key  # the upload's own result
    logged = [e.message for e in instance.all_logs(result.run_id) if e.step_key == "staged_metric_rows"]
    assert any(m.startswith(f"staging upload {submitted.upload_id}: 200 rows (") and "(100%)" in m
               for m in logged), logged  # staging's progress, in the Dagster run log


def test_fifteen_percent_invalid_fails_the_threshold_and_promotes_nothing(instance, database, db, tmp_path):
    path = write_export(tmp_path / "e.csv", "tiktok", with_invalid_share(daily_rows(2, 2, 5, 10), 0.15))
    submitted = submit(database, tmp_path, path, platform="tiktok")
    result = run_upload(instance, submitted.partition_key)
    assert not result.success
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.partition == submitted.partition_key
    upload = upload_row(db, submitted.upload_id)
    assert upload["status"] == "failed"
    assert upload["error"].startswith("validation threshold missed: 170 of 200 rows valid (85.0%); threshold 90%")
    assert counts(db) == {"campaigns": 0, "ad_sets": 0, "ads": 0, "daily_metrics": 0, "ingestion_events": 0}


def test_fifteen_percent_invalid_with_force_partial_promotes_the_valid_rows(instance, database, db, tmp_path):
    path = write_export(tmp_path / "e.json", "google", with_invalid_share(daily_rows(2, 2, 5, 10), 0.15))
    submitted = submit(database, tmp_path, path, platform="google", force_partial=True)
    result = run_upload(instance, submitted.partition_key)
    assert result.success
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["promoted_rows"], upload["invalid_rows"]) == ("partial", 170, 30)
    assert counts(db)["daily_metrics"] == 170
    assert table(db, "SELECT event_type FROM ingestion_events") == [{"event_type": "upload.partial"}]


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("bad.csv", b'campaign_id,ad_id,date\n1,2,"2024-01-01\n3,4,2024-01-02\n',
         "malformed file: line 2: malformed CSV: a quoted field is never closed (unbalanced quote)"),
        ("bad.json", b'[\n{"ad_id": "1", "date": "2024-01-01"},\n{"ad_id": "2", "da',
         "malformed file: line 3: truncated or invalid JSON in the record starting here"),
        # a line past the bound (MAX_RECORD_CHARS) is not read whole: the file fails, naming the line
        ("long.csv", b"campaign_id,ad_id,date\n1,2,2024-01-01\n3," + b"4" * (5 * 2**20) + b",2024-01-02\n",
         "malformed file: line 3: a line longer than 4,194,304 characters"),
        ("long.jsonl", b'{"ad_id": "1", "date": "2024-01-01"}\n{"ad_id": "' + b"x" * (5 * 2**20) + b'"}\n',
         "malformed file: line 2: a line longer than 4,194,304 characters"),
    ],
)
def test_malformed_files_fail_with_the_line(instance, database, db, tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    submitted = submit(database, tmp_path, path)
    result = run_upload(instance, submitted.partition_key)
    assert not result.success
    upload = upload_row(db, submitted.upload_id)
    assert upload["status"] == "failed" and upload["error"].startswith(reason)
    assert counts(db)["daily_metrics"] == 0


def test_bom_and_non_utf8_headers(instance, database, db, tmp_path):
    rows = list(daily_rows(1, 1, 2, 3))
    bom = write_export(tmp_path / "bom.csv", "meta", rows, encoding="utf-8-sig")
    latin = tmp_path / "latin.csv"
    text = "campaign_id,adset_id,ad_id,date_start,impressions,clicks,spend,account_currency,Région\n"
    text += "".join(f"{r['campaign_id']},{r['ad_set_id']},{r['ad_id']}x,{r['date']},{r['impressions']},"
                    f"{r['clicks']},{r['spend']},EUR,Île-de-France\n" for r in rows)
    latin.write_bytes(text.encode("cp1252"))
    for path in (bom, latin):
        submitted = submit(database, tmp_path, path)
        assert run_upload(instance, submitted.partition_key).success
        assert upload_row(db, submitted.upload_id)["status"] == "completed"
    raw = table(db, """SELECT staged_record(raw_data, raw_columns) AS raw_data FROM staging_rows JOIN data_uploads
                          USING (upload_id) WHERE staged_record(raw_data, raw_columns) ? 'Région' LIMIT 1""")
    assert raw and raw[0]["raw_data"]["Région"] == "Île-de-France"
    assert table(db, "SELECT count(*) AS n FROM daily_metrics")[0]["n"] == 12


def test_overlapping_update_upserts_without_duplicates(instance, database, db, tmp_path):
    first = write_export(tmp_path / "day1.csv", "meta", daily_rows(2, 2, 5, 10, seed=1))
    run_upload(instance, submit(database, tmp_path, first).partition_key)
    before = counts(db)
    # 30 % of keys overlap (same ads, dates 8-10), with new values; 70 % are new dates.
    second_rows = list(daily_rows(2, 2, 5, 10, start=__import__("datetime").date(2024, 3, 8), seed=2))
    second = write_export(tmp_path / "day2.csv", "meta", second_rows)
    result = run_upload(instance, submit(database, tmp_path, second).partition_key)
    assert result.success
    after = counts(db)
    assert after["daily_metrics"] == before["daily_metrics"] + 140  # 200 rows, 60 of them updates
    assert (after["campaigns"], after["ads"]) == (before["campaigns"], before["ads"])
    updated = table(db, "SELECT impressions FROM daily_metrics WHERE ad_id = 'c0s0a0' AND date = '2024-03-08'")
    assert updated == [{"impressions": second_rows[0]["impressions"]}]
    assert after["ingestion_events"] == 2


def test_duplicate_file_is_reported_and_not_repromoted(instance, database, db, tmp_path):
    path = write_export(tmp_path / "e.csv", "meta", daily_rows(1, 1, 2, 2))
    first = submit(database, tmp_path, path)
    run_upload(instance, first.partition_key)
    again = submit(database, tmp_path, path)
    assert again.status == "duplicate" and again.duplicate_of == first.upload_id
    assert len(table(db, "SELECT * FROM data_uploads")) == 1
    other_platform = submit(database, tmp_path, path, platform="tiktok")
    assert other_platform.status == "pending"


def test_retried_run_and_duplicate_tick_make_one_event(instance, database, db, tmp_path):
    path = write_export(tmp_path / "e.jsonl", "meta", daily_rows(1, 2, 2, 3))
    submitted = submit(database, tmp_path, path)
    with dg.build_sensor_context(instance=instance, resources={"postgres": PostgresResource()}) as context:
        tick = metric_upload_sensor(context)
        [request] = tick.run_requests
        assert request.run_key == submitted.partition_key and request.tags[WORKSPACE_TAG] == "acme"
        again = metric_upload_sensor(context)  # the duplicate tick: the same run key, launched once by Dagster
        assert [r.run_key for r in again.run_requests] == [request.run_key]
        run_upload(instance, submitted.partition_key)
        assert metric_upload_sensor(context).run_requests == []  # no longer pending
    snapshot = table(db, "SELECT * FROM daily_metrics ORDER BY ad_id, date")
    again = run_upload(instance, submitted.partition_key)  # a person re-materialises the promoted upload
    assert not again.success  # not green on nothing: it says the upload is done
    [failure] = [e for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "everything is done" in failure.step_failure_data.user_failure_data.description
    assert table(db, "SELECT * FROM daily_metrics ORDER BY ad_id, date") == snapshot  # nothing changed
    assert len(table(db, "SELECT * FROM ingestion_events")) == 1
    assert len(table(db, "SELECT * FROM staging_rows")) == 12  # not staged twice


def test_promoting_the_same_upload_twice_changes_nothing(database, db, tmp_path):
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.metrics import pipeline
    from ingestion_pipeline.metrics.promotion import promote_upload
    from ingestion_pipeline.metrics.uploads import MetricUpload

    path = write_export(tmp_path / "e.csv", "meta", daily_rows(1, 2, 2, 3))
    submitted = submit(database, tmp_path, path)
    policy = load_settings().reliability
    pipeline.claim_upload(database, submitted.partition_key, Worker("run-1", "run-1", 60), policy)
    pipeline.stage(database, submitted.partition_key, "run-1", policy)
    pipeline.promote(database, submitted.partition_key, "run-1")
    snapshot = {t: table(db, f"SELECT * FROM {t} ORDER BY 1, 2, 3") for t in ("campaigns", "ad_sets", "ads")}
    facts = table(db, "SELECT * FROM daily_metrics ORDER BY ad_id, date")
    with connect(database.url) as conn, conn.transaction():  # the SQL itself, bypassing the status guard
        upload = conn.execute("SELECT * FROM data_uploads WHERE upload_id = %s", (submitted.upload_id,)).fetchone()
        result = promote_upload(conn, MetricUpload.from_row(upload), below_threshold=False)
    assert result.upserted == {"campaigns": 0, "ad_sets": 0, "ads": 0, "daily_metrics": 0}
    assert not result.event_created
    assert {t: table(db, f"SELECT * FROM {t} ORDER BY 1, 2, 3") for t in snapshot} == snapshot
    assert table(db, "SELECT * FROM daily_metrics ORDER BY ad_id, date") == facts


def test_facts_whose_ad_is_unknown_are_unpromotable_and_upload_partial(instance, database, db, tmp_path):
    path = tmp_path / "facts.csv"
    path.write_text(
        "campaign_id,adset_id,ad_id,date_start,impressions,clicks,spend,account_currency\n"
        + "".join(f"1,2,3,2024-03-{d:02d},100,1,1.00,USD\n" for d in range(1, 20))
        + "\n,,999,2024-03-01,100,1,1.00,USD\n"  # only an ad id, and no such ad anywhere
    )
    submitted = submit(database, tmp_path, path)
    assert run_upload(instance, submitted.partition_key).success
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["promoted_rows"], upload["unpromotable_rows"]) == ("partial", 19, 1)
    [row] = table(db, "SELECT validation_errors FROM staging_rows WHERE validation_status = 'unpromotable'")
    assert row["validation_errors"] == [{"field": "ad_id", "error": "ad 999 not found in this upload or the workspace"}]


def test_cleanup_deletes_old_staging_rows_only(database, db, tmp_path, instance):
    path = write_export(tmp_path / "e.csv", "meta", daily_rows(1, 1, 1, 4))
    run_upload(instance, submit(database, tmp_path, path).partition_key)
    db.execute("UPDATE staging_rows SET created_at = now() - interval '8 days' WHERE row_index <= 2")
    result = staging_cleanup_job.execute_in_process(
        instance=instance, resources={"postgres": PostgresResource(), "settings": SettingsResource()},
        run_config={"ops": {"delete_expired_staging_rows": {"config": {"retention_days": 7}}}},
    )
    deleted = result.output_for_node("delete_expired_staging_rows")
    assert deleted == 2
    assert table(db, "SELECT count(*) AS n FROM staging_rows")[0]["n"] == 2
    assert table(db, "SELECT count(*) AS n FROM daily_metrics")[0]["n"] == 4
    assert staging_cleanup_schedule.cron_schedule == "15 3 * * *"


def test_an_older_upload_promoted_late_never_overwrites_newer_figures(instance, database, db, tmp_path):
    """Two exports of one workspace with overlapping keys, promoted out of order: the newer figures stay."""
    older_rows = list(daily_rows(1, 1, 2, 4, seed=1))
    newer_rows = list(daily_rows(1, 1, 2, 4, seed=2, start=date(2024, 3, 3)))
    older = submit(database, tmp_path, write_export(tmp_path / "older.csv", "meta", older_rows))
    newer = submit(database, tmp_path, write_export(tmp_path / "newer.csv", "meta", newer_rows))
    assert older.upload_id < newer.upload_id
    assert run_upload(instance, newer.partition_key).success
    assert run_upload(instance, older.partition_key).success  # promoted last
    stored = {(r["ad_id"], str(r["date"])): r for r in table(db, "SELECT * FROM daily_metrics")}
    for row in newer_rows:
        fact = stored[(row["ad_id"], row["date"])]
        assert (fact["impressions"], fact["last_upload_id"]) == (row["impressions"], newer.upload_id)
    for row in older_rows:
        if row["date"] < "2024-03-03":  # keys only the older upload has are still promoted
            fact = stored[(row["ad_id"], row["date"])]
            assert (fact["impressions"], fact["last_upload_id"]) == (row["impressions"], older.upload_id)
    assert len(stored) == 2 * 6


def test_non_finite_and_out_of_range_values_are_row_errors(instance, database, db, tmp_path):
    path = tmp_path / "odd.json"
    records = [{"campaign_id": r["campaign_id"], "adset_id": r["ad_set_id"], "ad_id": r["ad_id"],
                "date_start": r["date"], "impressions": r["impressions"], "clicks": r["clicks"], "spend": r["spend"],
                "account_currency": "USD"} for r in daily_rows(1, 1, 1, 30)]
    records[3]["impressions"] = float("inf")
    records[7]["impressions"] = 1e30
    path.write_text(json.dumps(records))  # json writes Infinity, as some exporters do
    assert "Infinity" in path.read_text()
    submitted = submit(database, tmp_path, path)
    assert run_upload(instance, submitted.partition_key).success
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["invalid_rows"], upload["promoted_rows"]) == ("completed", 2, 28)
    errors = [e["error"] for r in table(db, "SELECT validation_errors FROM staging_rows WHERE validation_status "
                                            "= 'invalid' ORDER BY row_index") for e in r["validation_errors"]]
    assert errors == ["not a finite number ('inf')", "out of range (1e+30; at most 9,223,372,036,854,775,807)"]


def test_a_failed_upload_is_not_run_again_by_automation(instance, database, db, tmp_path):
    """A permanent failure (threshold missed) fails once: a repeated automated run changes nothing."""
    path = write_export(tmp_path / "e.csv", "meta", with_invalid_share(daily_rows(2, 2, 5, 10), 0.15))
    submitted = submit(database, tmp_path, path)
    assert not run_upload(instance, submitted.partition_key).success
    staged = table(db, "SELECT count(*) AS n FROM staging_rows")[0]["n"]
    again = run_upload(instance, submitted.partition_key, tags={"dagster/sensor_name": "metric_upload_sensor"})
    assert not again.success  # the blocking check stays failed on a failed upload; nothing is promoted
    [check] = again.get_asset_check_evaluations()
    assert not check.passed and check.description.startswith("the upload failed: validation threshold missed")
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["error_code"], upload["attempts"]) == ("failed", "threshold_missed", 1)
    assert table(db, "SELECT count(*) AS n FROM staging_rows")[0]["n"] == staged
    events = [r["event"] for r in table(db, "SELECT event FROM ledger_history WHERE kind = 'metric_upload' "
                                            "ORDER BY history_id")]
    assert events == ["claimed", "staging_complete", "failed"]
