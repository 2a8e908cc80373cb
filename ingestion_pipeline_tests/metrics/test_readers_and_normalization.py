import io
import json

import pytest

from ingestion_pipeline.metrics.normalization import normalize_row
from ingestion_pipeline.metrics.readers import MalformedFileError, read_rows


def rows(data: bytes, fmt: str) -> list:
    return list(read_rows(io.BytesIO(data), fmt))


def test_csv_with_bom_and_cp1252_headers():
    data = "\ufeffcampaign_id,Kampagne Größe\n1,x\n".encode()
    assert rows(data, "csv") == [(2, {"campaign_id": "1", "Kampagne Größe": "x"})]
    latin = "campaign_id,Größe,Währung\n1,groß,€\n".encode("cp1252")
    [(line, record)] = rows(latin, "csv")
    assert record == {"campaign_id": "1", "Größe": "groß", "Währung": "€"}


def test_unbalanced_quote_fails_with_its_line():
    data = b'campaign_id,name\n1,"ok"\n2,"never closed\n3,x\n4,y\n'
    with pytest.raises(MalformedFileError, match="line 3: malformed CSV: a quoted field is never closed"):
        rows(data, "csv")


def test_json_array_streams_and_truncation_reports_the_line():
    data = b'[\n {"a": 1},\n {"a": 2},\n {"a": 3\n'
    reader = read_rows(io.BytesIO(data), "json")
    assert next(reader) == (2, {"a": 1})
    assert next(reader) == (3, {"a": 2})
    with pytest.raises(MalformedFileError, match="line 4: truncated or invalid JSON"):
        next(reader)


def test_json_array_larger_than_the_read_buffer():
    body = ",\n".join(json.dumps({"i": i, "pad": "x" * 100}) for i in range(5000))
    parsed = rows(f"[{body}]".encode(), "json")
    assert len(parsed) == 5000 and parsed[-1][1]["i"] == 4999


def test_json_array_lines_hold_across_buffer_refills():
    """Records on their own lines, many of them spanning a refill of the 64 KiB read buffer."""
    body = ",\n".join(json.dumps({"i": i, "pad": "x" * 1000}) for i in range(200))
    parsed = rows(f"[\n{body}\n]".encode(), "json")
    assert [line for line, _ in parsed] == [record["i"] + 2 for _, record in parsed]


class _Counted(io.RawIOBase):
    """Bytes of ``data`` handed out so far: how much of a file a reader read."""

    def __init__(self, data: bytes) -> None:
        self._data, self.read_bytes = io.BytesIO(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._data.readinto(buffer)
        self.read_bytes += n
        return n


@pytest.mark.parametrize(("fmt", "head", "line"), [
    ("csv", b"campaign_id,name\n1,", 2),
    ("jsonl", b'{"campaign_id": "1"}\n{"name": "', 2),
    ("json", b'[\n{"campaign_id": "1"},\n{"name": "', 3),
])
def test_a_line_or_record_past_the_bound_fails_without_being_read_whole(fmt, head, line):
    from ingestion_pipeline.metrics.readers import MAX_RECORD_CHARS

    stream = _Counted(head + b"a" * (40 * 2**20) + b'"}\n')
    kind = "record starting here is" if fmt == "json" else "line"
    with pytest.raises(MalformedFileError, match=f"line {line}: .*{kind} longer than {MAX_RECORD_CHARS:,} characters"):
        list(read_rows(stream, fmt))
    assert stream.read_bytes < 2 * MAX_RECORD_CHARS  # 40 MiB in the file; the reader stopped past the bound


def test_json_lines_and_json_lines_named_json():
    data = b'{"a": 1}\n\n{"a": 2}\n'
    assert rows(data, "jsonl") == [(1, {"a": 1}), (3, {"a": 2})]
    assert [r for _, r in rows(data, "json")] == [{"a": 1}, {"a": 2}]
    with pytest.raises(MalformedFileError, match="line 2: invalid JSON Lines record"):
        rows(b'{"a": 1}\n{"a": \n', "jsonl")


@pytest.mark.parametrize(
    ("record", "platform", "field", "error"),
    [
        ({"campaign_id": "1", "adset_id": "2", "ad_id": "3", "date_start": "2024-01-01", "impressions": "10",
          "clicks": "1", "spend": "-3.10", "account_currency": "USD"}, "meta", "spend", "negative (-3.10)"),
        ({"Ad ID": "3", "Day": "01/02/2024", "Impressions": "10", "Clicks": "1", "Cost": "1", "Currency code": "USD"},
         "google", "date", "not a date ('01/02/2024'); use YYYY-MM-DD"),
        ({"ad_id": "3", "stat_time_day": "2024-01-01", "impressions": "10", "clicks": "11", "spend": "1",
          "currency": "USD"}, "tiktok", "clicks", "clicks (11) exceed impressions (10)"),
        ({"campaign_name": "no ids"}, "meta", "row", "missing key: no campaign_id, ad_set_id or ad_id"),
        ({"campaign_id": "1", "platform": "myspace"}, "meta", "platform", "unknown platform 'myspace'"),
        ({"ad_id": "3", "date": "2024-01-01", "impressions": "10", "clicks": "1", "spend": "1", "currency": "dollars"},
         "meta", "currency", "not an ISO 4217 code ('DOLLARS')"),
    ],
)
def test_invalid_fields_have_specific_reasons(record, platform, field, error):
    row = normalize_row(record, workspace_id="w", platform=platform)
    assert not row.valid
    assert {"field": field, "error": error} in row.errors


def test_platform_columns_map_to_one_schema():
    google = normalize_row({"Campaign ID": " 9 ", "Ad group ID": "8", "Ad ID": "7", "Day": "20240301",
                            "Impressions": "1,200", "Clicks": "3", "Cost micros": "2500000",
                            "Currency code": "eur"}, workspace_id="w", platform="google")
    assert google.valid and google.entity_type == "daily_metric"
    assert google.values["campaign_id"] == "9" and google.values["date"] == "2024-03-01"
    assert google.values["impressions"] == 1200 and google.values["spend"] == "2.5"
    assert google.values["currency"] == "EUR"
    dims = [normalize_row(r, workspace_id="w", platform="meta") for r in
            ({"campaign_id": "1", "campaign_name": "A"}, {"adset_id": "2", "campaign_id": "1"},
             {"ad_id": "3", "adset_id": "2"})]
    assert [d.entity_type for d in dims] == ["campaign", "ad_set", "ad"] and all(d.valid for d in dims)
    assert len({d.natural_key_hash for d in dims}) == 3
