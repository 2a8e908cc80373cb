"""The Arrow path stages exactly what the row-by-row path stages: same rows, line numbers, values and
reasons, for clean exports and for every quirk the row path handles (each file is staged both ways)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.metrics import csv_batches, pipeline, staging
from ingestion_pipeline.metrics.readers import MalformedFileError
from ingestion_pipeline.metrics.uploads import submit_metric_file
from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share
from ingestion_pipeline.samples.platform_exports import WRITERS

META_HEADER = ("Reporting starts,Reporting ends,Day,Campaign name,Ad set name,Ad name,Campaign ID,Ad set ID,Ad ID,"
               "Impressions,Reach,Amount spent (USD),Link clicks,Results")
META_ROWS = [
    "2024-03-01,2024-03-31,2024-03-01,Spring,Set A,Ad 1,c1,s1,a1,1000,800,12.50,30,2",  # plain
    '2024-03-01,2024-03-31,2024-03-02,Spring,Set A,Ad 1,c1,s1,a1,"1,000",800,"$1,234.50",30,',  # separators, sign
    "2024-03-01,2024-03-31,2024-03-03,Spring,Set A,Ad 1,c1,s1,a1,12.0,800,1,3,1",  # a whole number written 12.0
    "2024-03-01,2024-03-31,2024-03-04,Spring,Set A,Ad 1,c1,s1,a1,1e30,800,1,3,1",  # out of range
    "2024-03-01,2024-03-31,2024-03-05,Spring,Set A,Ad 1,c1,s1,a1,100,80,Infinity,3,1",  # not finite
    "2024-03-01,2024-03-31,2024-03-06,Spring,Set A,Ad 1,c1,s1,a1,100,80,-12.50,3,1",  # negative
    "2024-03-01,2024-03-31,2024-02-30,Spring,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1",  # no such day
    "2024-03-01,2024-03-31,2024-3-7,Spring,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1",  # unpadded date (valid)
    "2024-03-01,2024-03-31,2024-03-08,Spring,Set A,Ad 1,c1,s1,a1,100,80,1.00,300,1",  # clicks > impressions
    '2024-03-01,2024-03-31,2024-03-09,"Two\nlines",Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1',  # a break in a value
    '2024-03-01,2024-03-31,2024-03-10,"Big ""sale"" C:\\ads",Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1',  # " and \\
    "",  # a blank line
    "2024-03-01,2024-03-31,2024-03-11,Spring,Set A",  # too few fields
    "2024-03-01,2024-03-31,2024-03-12,Spring,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1,extra",  # too many
    ",,,,,,,,,,,,,",  # only separators
    "2024-03-01,2024-03-31,2024-03-13,  Spring  , Set A ,Ad 1, c1 ,s1,a1,  100 ,80, 1.00 , 3 ,1",  # padded
    "2024-03-01,2024-03-31,2024-03-14,Été ☀,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1",  # non-ASCII
    "2024-03-01,2024-03-31,2024-03-15,Tab\there,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1",  # a control character
    "2024-03-01,2024-03-31,2024-03-16,Spring,Set A,Ad 1,c1,s1,,100,80,1.00,3,1",  # no ad id
    "2024-03-01,2024-03-31,2024-03-17,Spring,Set A,Ad 1,c1,s1,a1,100,80,1.00,,",  # blank clicks: 0 for Meta
    "2024-03-01,2024-03-31,2024-03-18,Spring,Set A,Ad 1,c1,s1,a1,100,80,0.1234567,3,0.0000001",  # 7 decimals
    "2024-03-01,2024-03-31,2024-03-19,Spring,Set A,Ad 1,c1,s1,a1,0100,80,1.00,3,1",  # a leading zero
    "2024-03-01,2024-03-31,2024-03-20,Nul\x00here,Set A,Ad 1,c1,s1,a1,100,80,1.00,3,1",  # NUL
    "2024-03-01,2024-03-31,2024-03-21,Spring,Set A,Ad 1,c1,s1,a1,100,80,,3,1",  # spend blank: missing
    "2024-03-01,2024-03-31,2024-03-22,Spring,Set A,Ad 1,c1,s1,a1,100,80,99999999999999.5,3,1",  # 1e14: range
    "Total,,,,,,,,,5000,,100.00,60,",  # the totals row
]


def _meta(tmp_path: Path, name: str, *, newline: str = "\n", encoding: str = "utf-8", header: str = META_HEADER,
          rows: list[str] = META_ROWS) -> Path:
    path = tmp_path / name
    path.write_bytes(newline.join([header, *rows, ""]).replace("\n", newline).encode(encoding))
    return path


def _stage_both(database, tmp_path, path: Path, platform: str | None):
    store = LocalUploadStore(tmp_path / "store")
    results = {}
    for workspace, arrow in (("arrow", True), ("rows", False)):
        with path.open("rb") as stream:
            submitted = submit_metric_file(database, store, workspace_id=workspace, platform=platform,
                                           filename=path.name, stream=stream, max_bytes=2**31)
        assert submitted.status == "pending", submitted.reason
        worker = Worker(f"run-{workspace}", f"run-{workspace}", 600)
        upload = pipeline.claim_upload(database, submitted.partition_key, worker, ReliabilitySettings())
        counts = staging.stage_upload(database, upload, owner=worker.owner, arrow=arrow)
        with database.connection() as conn:
            rows = conn.execute(
                """SELECT row_index, line_number, entity_type, natural_key_hash,
                          staged_record(raw_data, u.raw_columns) AS raw_data, s.campaign_id, s.ad_set_id,
                          s.ad_id, s.campaign_name, s.ad_set_name, s.ad_name, s.status, s.date, s.impressions, s.clicks,
                          s.spend, s.currency, s.conversions, validation_status, validation_errors
                     FROM staging_rows s JOIN data_uploads u USING (upload_id)
                    WHERE u.workspace_id = %s ORDER BY row_index""", (workspace,)).fetchall()
        results[workspace] = (counts, rows, submitted.platform or upload.platform)
    return results


def _same(results) -> tuple:
    (arrow, arrow_rows, platform), (rows, row_rows, _) = results["arrow"], results["rows"]
    assert arrow.reader == "arrow" and rows.reader == "rows"
    assert (arrow.total, arrow.valid, arrow.invalid, arrow.skipped, arrow.layout, arrow.notes) == \
        (rows.total, rows.valid, rows.invalid, rows.skipped, rows.layout, rows.notes)
    assert len(arrow_rows) == len(row_rows)
    for a, r in zip(arrow_rows, row_rows, strict=True):
        if r["natural_key_hash"]:  # the key includes the workspace: each is checked against its own
            for row, ws in ((a, "arrow"), (r, "rows")):
                text = f"daily_metric|{ws}|{platform}|{row['ad_id']}|{row['date'].isoformat()}"
                assert row["natural_key_hash"] == hashlib.sha256(text.encode()).hexdigest()
        assert {k: v for k, v in a.items() if k != "natural_key_hash"} == \
            {k: v for k, v in r.items() if k != "natural_key_hash"}
    return arrow, arrow_rows


def test_every_quirk_is_staged_as_the_row_path_stages_it(database, tmp_path):
    arrow, rows = _same(_stage_both(database, tmp_path, _meta(tmp_path, "quirks.csv"), "meta"))
    by_day = {r["raw_data"].get("Day"): r for r in rows}
    assert arrow.skipped == 1 and arrow.vectorised >= 5  # the totals row; most plain rows never left Arrow
    reasons = {e["field"] + ": " + e["error"] for r in rows for e in r["validation_errors"]}
    assert "impressions: out of range (1e30; at most 9,223,372,036,854,775,807)" in reasons
    assert "spend: not a finite number ('Infinity')" in reasons
    assert "row: row has 5 fields, the header has 14" in reasons
    assert str(by_day["2024-03-02"]["spend"]) == "1234.50"
    assert by_day["2024-03-03"]["impressions"] == 12
    assert by_day["2024-03-10"]["line_number"] == 13  # line 12 is the second line of the row before
    assert by_day["2024-03-10"]["campaign_name"] == 'Big "sale" C:\\ads'


@pytest.mark.parametrize("variant", ["crlf", "cp1252", "bare-cr"])
def test_line_endings_and_encodings(database, tmp_path, variant):
    rows = [r for r in META_ROWS if "☀" not in r and "\x00" not in r]
    if variant == "bare-cr":
        rows = [r for r in rows if "\n" not in r] + ['2024-03-01,2024-03-31,2024-03-28,"a\rb",S,A,c1,s1,a1,1,1,1,1,1']
    cafe = "2024-03-01,2024-03-31,2024-03-29,Café,S,A,c1,s1,a1,1,1,1,1,1"
    path = _meta(tmp_path, f"{variant}.csv", rows=[*rows, cafe],
                 newline={"crlf": "\r\n", "cp1252": "\n", "bare-cr": "\r"}[variant],
                 encoding="cp1252" if variant == "cp1252" else "utf-8")
    _same(_stage_both(database, tmp_path, path, "meta"))


@pytest.mark.parametrize("layout", [name for name, (_, fmt) in sorted(WRITERS.items()) if fmt == "csv"])
def test_each_platform_csv_over_many_batches(database, tmp_path, monkeypatch, layout):
    monkeypatch.setattr(csv_batches, "BLOCK_BYTES", 4096)  # dozens of batches
    writer, _ = WRITERS[layout]
    path = writer(tmp_path / "export.csv", with_invalid_share(daily_rows(3, 3, 4, 5), 0.1))
    text = path.read_text(encoding="utf-8-sig").splitlines()
    text.insert(len(text) // 2, text[len(text) // 2].rsplit(",", 2)[0])  # a refused row mid-file
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    arrow, _ = _same(_stage_both(database, tmp_path, path, None))
    assert arrow.total == 181 and arrow.vectorised >= 160


@pytest.mark.parametrize("resumed", [False, True], ids=["first-attempt", "resumed"])
@pytest.mark.parametrize("reader", ["arrow", "rows", "json"])
def test_staging_reports_rows_rate_and_bytes_read_as_it_goes(database, tmp_path, monkeypatch, reader, resumed):
    """Long staging shows progress (the Dagster step passes its run log as ``progress_log``). Its rows are
    the rows read from the file: a resumed attempt ends at the file's rows too, on every path."""
    monkeypatch.setattr(csv_batches, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(staging, "JSON_BATCH_ROWS", 20)
    monkeypatch.setenv("INGESTION_PROGRESS_SECONDS", "0")  # every batch reports
    layout = "meta.insights_api_json" if reader == "json" else "meta.ads_manager_csv"
    path = WRITERS[layout][0](tmp_path / ("export.json" if reader == "json" else "export.csv"),
                              daily_rows(2, 2, 5, 5))
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, LocalUploadStore(tmp_path / "store"), workspace_id="w",
                                       platform="meta", filename=path.name, stream=stream, max_bytes=2**31)
    worker = Worker("run", "run", 600)
    upload = pipeline.claim_upload(database, submitted.partition_key, worker, ReliabilitySettings())
    if resumed:  # an earlier attempt staged the first batch, then died
        def killed(name: str) -> None:
            raise RuntimeError("worker killed")

        monkeypatch.setattr(staging, "failpoint", killed)
        with pytest.raises(RuntimeError):
            staging.stage_upload(database, upload, owner=worker.owner, arrow=reader != "rows", chunk_rows=25)
        monkeypatch.setattr(staging, "failpoint", lambda name: None)
    seen: list[str] = []
    counts = staging.stage_upload(database, upload, owner=worker.owner, arrow=reader != "rows", chunk_rows=25,
                                  progress_log=seen.append)
    assert counts.total == 100 and (counts.resumed_after > 0) == resumed
    assert len(seen) >= 3, seen  # several batches, then the final report
    assert all(m.startswith(f"staging upload {upload.upload_id}: ") for m in seen)
    assert seen[-1].split(": ")[1].startswith("100 rows (") and "(100%)" in seen[-1] and seen[-1].endswith("ETA 0s")


@pytest.mark.parametrize("scan_bytes", [2, 3, 1 << 16], ids=["pairs-split", "odd-reads", "one-read"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_the_byte_scan_counts_line_breaks_as_rows_line_numbers_do(tmp_path, monkeypatch, end, scan_bytes):
    """Staging's progress places a row by its line number among the file's line breaks: a file with
    carriage returns only has breaks too (its progress sat at 100% from the first batch)."""
    monkeypatch.setattr(csv_batches, "SCAN_BYTES", scan_bytes)
    path = tmp_path / "export.csv"
    path.write_bytes(end.join(["a,b", "1,2", '"x\ny",3', "4,5", ""]).encode())  # one break inside a value
    scan = csv_batches.scan_bytes(path)
    assert scan.line_breaks == 5 and scan.has_cr == ("\r" in end)


@pytest.mark.parametrize("scan_bytes", [2, 3, 1 << 16], ids=["pairs-split", "odd-reads", "one-read"])
def test_the_byte_scan_finds_a_next_line_character_wherever_the_reads_split_it(tmp_path, monkeypatch, scan_bytes):
    """U+0085 (bytes C2 85) is space to str.strip(): a file holding one takes the exact path's checks.
    A "Å" (C3 85) shares its second byte and is not one."""
    monkeypatch.setattr(csv_batches, "SCAN_BYTES", scan_bytes)
    plain, with_next_line = tmp_path / "plain.csv", tmp_path / "next-line.csv"
    plain.write_text("a,b\nÅse,1\n", encoding="utf-8")
    with_next_line.write_text("a,b\nÅse\u0085,1\n", encoding="utf-8")
    assert not csv_batches.scan_bytes(plain).has_controls
    assert csv_batches.scan_bytes(with_next_line).has_controls


def test_an_interrupted_arrow_staging_resumes_where_it_stopped(database, tmp_path, monkeypatch):
    monkeypatch.setattr(csv_batches, "BLOCK_BYTES", 4096)
    writer, _ = WRITERS["meta.ads_manager_csv"]
    path = writer(tmp_path / "export.csv", with_invalid_share(daily_rows(2, 2, 5, 5), 0.1))
    calls = []

    def crash_after_two(name):
        calls.append(name)
        if len(calls) == 2:
            raise RuntimeError("worker killed")

    store = LocalUploadStore(tmp_path / "store")
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, store, workspace_id="w", platform="meta", filename=path.name,
                                       stream=stream, max_bytes=2**31)
    worker = Worker("run-1", "run-1", 600)
    upload = pipeline.claim_upload(database, submitted.partition_key, worker, ReliabilitySettings())
    monkeypatch.setattr(staging, "failpoint", crash_after_two)
    with pytest.raises(RuntimeError):
        staging.stage_upload(database, upload, owner="run-1")
    monkeypatch.setattr(staging, "failpoint", lambda name: None)
    counts = staging.stage_upload(database, upload, owner="run-1")
    assert 0 < counts.resumed_after < 100 and counts.total == 100 and counts.invalid == 10
    with database.connection() as conn:
        indexes = [r["row_index"] for r in conn.execute(
            "SELECT row_index FROM staging_rows WHERE upload_id = %s ORDER BY 1", (upload.upload_id,))]
    assert indexes == list(range(1, 101))


def test_an_unclosed_quote_is_reported_with_its_line(database, tmp_path):
    path = _meta(tmp_path, "open.csv", rows=[META_ROWS[0], '2024-03-01,2024-03-31,2024-03-02,"Spring,S,A,c1'])
    with pytest.raises(MalformedFileError, match="line 3: malformed CSV"):
        _stage_both(database, tmp_path, path, "meta")


def test_text_that_is_not_valid_in_its_encoding_fails_as_on_the_row_path(database, tmp_path):
    good = "\n".join([META_HEADER, *META_ROWS[:2]]) + "\n"
    # after the 64 KiB sample the encoding is guessed from
    bad = b"2024-03-01,2024-03-31,2024-03-09,\xff\xfe,S,A,c1,s1,a1,1,1,1,1,1\n"
    (tmp_path / "bad.csv").write_bytes(good.encode() + b"x" * 70_000 + b"\n" + bad)
    path = tmp_path / "bad.csv"
    with pytest.raises((MalformedFileError, UnicodeDecodeError)):
        _stage_both(database, tmp_path, path, "meta")


@pytest.mark.parametrize("layout", [name for name, (_, fmt) in sorted(WRITERS.items()) if fmt == "json"])
def test_each_platform_json_response_in_batches(database, tmp_path, monkeypatch, layout):
    monkeypatch.setattr(staging, "JSON_BATCH_ROWS", 7)  # batches end mid-response
    writer, _ = WRITERS[layout]
    path = writer(tmp_path / "export.json", with_invalid_share(daily_rows(2, 2, 3, 5), 0.1))
    arrow, _ = _same(_stage_both(database, tmp_path, path, None))
    assert arrow.total == 60 and arrow.invalid == 6
    if layout != "google.search_stream_api_json":  # cost in micros: the exact path's
        assert arrow.vectorised >= 50


def test_json_lines_with_every_kind_of_value(database, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "JSON_BATCH_ROWS", 3)
    base = {"Day": "2024-03-01", "Campaign name": "C", "Campaign ID": "c1", "Ad set name": "S", "Ad set ID": "s1",
            "Ad name": "A", "Ad ID": "a1", "Impressions": 100, "Amount spent (USD)": 1.5, "Link clicks": 3}
    variants = [{}, {"Impressions": 12.0}, {"Impressions": "1,000"}, {"Amount spent (USD)": None},
                {"Ad name": "two\nlines"}, {"Ad name": "tab\there"}, {"Link clicks": 300}, {"Ad ID": ""},
                {"Amount spent (USD)": 1e-7}, {"Day": "2024-02-30"}, {"Impressions": True}]
    lines = [json.dumps({**base, **v, "Day": v.get("Day", f"2024-03-{i + 1:02d}")}) for i, v in enumerate(variants)]
    lines.insert(3, "[1, 2]")  # not a record
    lines.append('{"Day": "2024-03-20", "Ad ID": "a1", "Impressions": Infinity, "Campaign name": "C"}')
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    arrow, rows = _same(_stage_both(database, tmp_path, path, "meta"))
    assert arrow.total == 13 and arrow.valid == 6 and arrow.vectorised == 2  # the rest took the exact path
    reasons = {e["field"] + ": " + e["error"] for r in rows for e in r["validation_errors"]}
    assert "row: not an object/record" in reasons and "impressions: not a finite number ('inf')" in reasons


def test_a_row_staged_as_values_reads_back_as_the_exports_record(database, tmp_path):
    """Arrow-staged valid rows keep only their values (sql/016); a row that turns out unpromotable is
    listed with the record as the export had it, column names included."""
    from ingestion_pipeline.metrics.promotion import promote_upload
    from ingestion_pipeline.metrics.uploads import upload_errors

    orphan = "2024-03-01,2024-03-31,2024-03-02,Spring,Set A,Ad 9,c1,,a9,100,80,1.00,3,1"  # no ad set id
    path = _meta(tmp_path, "orphan.csv", rows=[META_ROWS[2], orphan])  # 12.0 impressions: the exact path
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, LocalUploadStore(tmp_path / "store"), workspace_id="w",
                                       platform="meta", filename=path.name, stream=stream, max_bytes=2**31)
    worker = Worker("run", "run", 600)
    upload = pipeline.claim_upload(database, submitted.partition_key, worker, ReliabilitySettings())
    counts = staging.stage_upload(database, upload, owner=worker.owner)
    assert (counts.reader, counts.vectorised, counts.valid) == ("arrow", 1, 2)
    with database.transaction() as conn:
        assert promote_upload(conn, upload, below_threshold=False).unpromotable_rows == 1
        raw = conn.execute(
            "SELECT raw_data::jsonb AS raw_data FROM staging_rows WHERE upload_id = %s ORDER BY row_index",
            (upload.upload_id,)).fetchall()
        assert isinstance(raw[0]["raw_data"], dict) and isinstance(raw[1]["raw_data"], list)
        [error] = upload_errors(conn, upload.upload_id, workspace_id="w")
    assert error["raw_data"] == dict(zip(META_HEADER.split(","), orphan.split(","), strict=True))
