"""Metric exports over the API: upload, process, status with counts, the invalid rows, the events feed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg

from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export
from ingestion_pipeline_tests.helpers import process_in_process, table


def _upload(api, path, platform="meta", **data):
    return api.client.post("/v1/metrics/uploads", headers=api.as_("acme-user"), data={"platform": platform, **data},
                           files={"file": (path.name, path.read_bytes(), "text/csv")})


def test_upload_process_status_errors_events(api, database, db, tmp_path):
    started = datetime.now(UTC) - timedelta(seconds=5)
    export = write_export(tmp_path / "meta.csv", "meta", with_invalid_share(daily_rows(2, 2, 2, 5), 0.2))
    r = _upload(api, export, force_partial="true")
    assert r.status_code == 202, r.text
    upload_id = r.json()["upload_id"]
    again = _upload(api, export)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.json()["duplicate_of"] == upload_id

    with dg.instance_for_test() as instance:
        process_in_process(instance, database)

    status = api.client.get(f"/v1/metrics/uploads/{upload_id}", headers=api.as_("acme-user")).json()
    assert status["status"] == "partial" and status["total_rows"] == 40 and status["invalid_rows"] == 8
    errors = api.client.get(f"/v1/metrics/uploads/{upload_id}/errors", params={"limit": 5},
                            headers=api.as_("acme-user")).json()
    assert errors["total"] == 8 and len(errors["items"]) == 5 and errors["items"][0]["validation_errors"]
    page2 = api.client.get(f"/v1/metrics/uploads/{upload_id}/errors", params={"limit": 5, "page": 2},
                           headers=api.as_("acme-user")).json()
    assert len(page2["items"]) == 3
    events = api.client.get("/v1/events", params={"since": started.isoformat()}, headers=api.as_("acme-user")).json()
    assert [e["event_type"] for e in events["items"]] == ["upload.partial"]
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert api.client.get("/v1/events", params={"since": later}, headers=api.as_("acme-user")).json()["total"] == 0
    assert api.client.get("/v1/events", headers=api.as_("globex-user")).json()["total"] == 0


def test_metric_upload_refusals_leave_nothing(api, db, tmp_path):
    export = write_export(tmp_path / "meta.csv", "meta", daily_rows(1, 1, 1, 2))
    assert _upload(api, export, platform="myspace").status_code == 400
    assert _upload(api, export, force_partial="maybe").status_code == 400
    bad = tmp_path / "meta.xlsx"
    bad.write_bytes(b"PK\x03\x04")
    assert _upload(api, bad).status_code == 415
    assert table(db, "SELECT upload_id FROM data_uploads") == []
    root = api.services.metric_store.root
    assert not root.exists() or [p for p in root.rglob("*") if p.is_file()] == []
