"""Exports as the platforms write them: six layouts read, detected, validated row by row, summary rows
skipped, a metric the export does not carry left NULL, and an unknown layout explained."""

from __future__ import annotations

import io
import json
from collections import Counter

import dagster as dg
import pytest

from ingestion_pipeline.metrics.exports import ExportReader, sniff_layout
from ingestion_pipeline.metrics.layouts import UnknownLayout
from ingestion_pipeline.metrics.normalization import normalize_row
from ingestion_pipeline.metrics.readers import MalformedFileError
from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share
from ingestion_pipeline.samples.platform_exports import WRITERS, meta_ads_manager_csv
from ingestion_pipeline_tests.helpers import process_in_process, table

SUMMARY_ROWS = {"google.ui_report_csv": 3, "tiktok.ads_manager_csv": 1}
REASONS = {"spend: negative (-12.50)", "date: not a date ('2024-02-31'); use YYYY-MM-DD",
           "clicks: clicks (3968) exceed impressions (3963)", "ad_id: missing key"}


def _read(path, fmt, platform):
    with path.open("rb") as stream:
        reader = ExportReader(stream, fmt, platform)
        rows = [normalize_row(raw, workspace_id="w", platform=reader.layout.platform if reader.layout else platform,
                              plan=plan) for _, raw, plan in reader.rows()]
    return reader, rows


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_each_platform_layout_is_read_and_validated_row_by_row(layout, tmp_path):
    writer, fmt = WRITERS[layout]
    path = writer(tmp_path / f"export.{fmt}", with_invalid_share(daily_rows(2, 2, 2, 5), 0.1))
    platform = layout.split(".")[0]
    for given in (platform, None):  # with --platform, and detected from the columns
        reader, rows = _read(path, fmt, given)
        assert reader.layout.name == layout
        assert Counter(r.valid for r in rows) == {True: 36, False: 4}
        reasons = {f"{e['field']}: {e['error']}".replace(" 00:00:00", "") for r in rows for e in r.errors}
        assert {r.replace("-12.5)", "-12.50)") for r in reasons} == REASONS
        assert reader.summary_rows == SUMMARY_ROWS.get(layout, 0)  # totals are skipped, not invalid
        assert reader.notes == []
    valid = [r for r in rows if r.valid]
    assert {r.values["currency"] for r in valid} == {"USD"}
    assert all(r.values["spend"] is not None and r.values["impressions"] > 0 for r in valid)
    assert sniff_layout(path, fmt).layout.name == layout


def test_a_metric_the_export_does_not_carry_is_null_and_reported_once(tmp_path):
    path = meta_ads_manager_csv(tmp_path / "no-clicks.csv", daily_rows(1, 1, 2, 3), with_clicks=False)
    reader, rows = _read(path, "csv", "meta")
    assert all(r.valid for r in rows) and len(rows) == 6
    assert {r.values["clicks"] for r in rows} == {None}
    assert reader.notes == ["clicks: column not present (NULL for every row)"]


def test_headers_match_whatever_their_case_spacing_and_punctuation(tmp_path):
    text = ("  DAY ,campaign NAME,Campaign-ID,Ad Set Name,AD SET ID,ad name,Ad ID,IMPRESSIONS,"
            "Amount Spent [USD],link clicks\n2024-03-01,C,c1,S,s1,A,a1,100,1.50,3\n")
    reader, rows = _read(_file(tmp_path, "odd.csv", text), "csv", "meta")
    assert reader.layout.name == "meta.ads_manager_csv"
    [row] = rows
    assert row.valid and row.values["spend"] == "1.50" and row.values["currency"] == "USD"
    assert row.values["clicks"] == 3 and row.values["date"] == "2024-03-01"


def test_an_unknown_layout_lists_the_columns_and_the_closest_layout(tmp_path):
    path = _file(tmp_path, "mystery.csv", "Flight,Creative,Views,Money\nx,y,1,2\n")
    with pytest.raises(UnknownLayout, match=r"Flight, Creative, Views, Money.*closest is"):
        _read(path, "csv", "meta")
    near = _file(tmp_path, "near.csv", "Day,Campaign,Campaign ID,Ad group,Ad group ID,Impr.,Cost\n")
    with pytest.raises(UnknownLayout, match=r"closest is google.ui_report_csv, which also needs ad_id"):
        sniff_layout(near, "csv")


def test_an_api_error_response_is_not_a_report(tmp_path):
    path = _file(tmp_path, "tt.json", json.dumps({"code": 40100, "message": "Access token is invalid",
                                                  "data": {}}))
    with pytest.raises(MalformedFileError, match="API error response .code 40100: Access token is invalid"):
        _read(path, "json", "tiktok")


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.integration
def test_six_layouts_submitted_without_a_platform_are_promoted(database, db, project_dagster_home, tmp_path, capsys):
    from ingestion_pipeline.cli import main

    uploads = {}
    for i, layout in enumerate(sorted(WRITERS)):
        writer, fmt = WRITERS[layout]
        path = writer(tmp_path / f"{i}.{fmt}", with_invalid_share(daily_rows(2, 2, 2, 5, id_prefix=f"l{i}"), 0.1))
        assert main(["metrics", "submit", str(path), "--workspace", f"ws{i}", "--json"]) == 0
        submitted = json.loads(capsys.readouterr().out)
        assert submitted["layout"] == layout and submitted["platform"] == layout.split(".")[0]
        uploads[layout] = submitted["upload_id"]
    with dg.instance_for_test() as instance:
        process_in_process(instance, database)
    for i, layout in enumerate(sorted(WRITERS)):
        upload = table(db, "SELECT * FROM data_uploads WHERE upload_id = %s", uploads[layout])[0]
        assert upload["status"] == "completed", (layout, upload["error"])
        assert (upload["layout"], upload["total_rows"], upload["valid_rows"], upload["skipped_rows"]) == \
            (layout, 40, 36, SUMMARY_ROWS.get(layout, 0))
        counts = db.execute(
            """SELECT (SELECT count(*) FROM campaigns WHERE workspace_id = %(w)s) AS campaigns,
                      (SELECT count(*) FROM ad_sets WHERE workspace_id = %(w)s) AS ad_sets,
                      (SELECT count(*) FROM ads WHERE workspace_id = %(w)s) AS ads,
                      (SELECT count(*) FROM daily_metrics WHERE workspace_id = %(w)s) AS days""",
            {"w": f"ws{i}"}).fetchone()
        assert dict(counts) == {"campaigns": 2, "ad_sets": 4, "ads": 8, "days": 36}, layout


def test_a_later_export_without_a_column_keeps_the_earlier_values(database, db, project_dagster_home, tmp_path):
    from ingestion_pipeline.cli import main

    rows = list(daily_rows(1, 1, 1, 2))
    main(["metrics", "submit", str(meta_ads_manager_csv(tmp_path / "a.csv", rows)), "--workspace", "w"])
    with dg.instance_for_test() as instance:
        process_in_process(instance, database)
        later = [{**r, "impressions": int(r["impressions"]) + 1} for r in rows]
        main(["metrics", "submit", str(meta_ads_manager_csv(tmp_path / "b.csv", later, with_clicks=False)),
              "--workspace", "w"])
        process_in_process(instance, database)
    stored = db.execute("SELECT impressions, clicks FROM daily_metrics ORDER BY date").fetchall()
    assert [(s["impressions"], s["clicks"]) for s in stored] == [
        (int(r["impressions"]) + 1, int(r["clicks"])) for r in rows]
    notes = db.execute("SELECT notes FROM data_uploads ORDER BY upload_id DESC LIMIT 1").fetchone()["notes"]
    assert notes == ["clicks: column not present (NULL for every row)"]


def test_readers_still_read_bytes(tmp_path):
    reader = ExportReader(io.BytesIO(b"campaign_id,ad_id\n1,2\n"), "csv", "meta")
    assert [raw for _, raw, _ in reader.rows()] == [{"campaign_id": "1", "ad_id": "2"}]
    assert reader.layout.name == "meta.generic"


def test_an_api_response_too_big_to_parse_whole_is_refused_with_the_way_out(tmp_path, monkeypatch):
    from ingestion_pipeline.metrics import exports

    path = WRITERS["meta.insights_api_json"][0](tmp_path / "insights.json", daily_rows(1, 1, 2, 3))
    monkeypatch.setattr(exports, "API_OBJECT_MAX_BYTES", path.stat().st_size - 1)
    with pytest.raises(MalformedFileError, match="an API response is read whole.*send its rows as JSON Lines"):
        _read(path, "json", "meta")
    monkeypatch.setattr(exports, "API_OBJECT_MAX_BYTES", path.stat().st_size)
    assert len(_read(path, "json", "meta")[1]) == 6
