"""Sources over the API against a moto S3 server: add, sync now, see the outcome, pause, remove."""

from __future__ import annotations

from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.helpers import table


def test_add_sync_pause_remove(database, db, bucket, s3_env):
    client, name = bucket
    client.put_object(Bucket=name, Key="kb/a.md", Body=b"# A\n\nAlpha facts.\n")
    client.put_object(Bucket=name, Key="kb/b.txt", Body=b"Beta facts.\n")
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    admin = api.as_("acme-admin")
    r = api.client.post("/v1/sources", headers=admin, json={"uri": f"s3://{name}/kb/", "endpoint_url": s3_env})
    assert r.status_code == 201, r.text
    source_id = r.json()["source_id"]

    r = api.client.post(f"/v1/sources/{source_id}/sync", headers=admin)
    assert r.status_code == 202 and r.json()["status"] == "started"
    after = api.client.get(f"/v1/sources/{source_id}", headers=api.as_("acme-user")).json()
    assert after["last_sync_at"] and after["last_sync_error"] is None
    assert after["queued_objects"] == 2 and after["passes_completed"] == 1
    assert len(table(db, "SELECT run_id FROM ingestion_runs WHERE tenant_id = 'acme'")) == 2

    missing = api.client.post("/v1/sources", headers=admin,
                              json={"uri": "s3://no-such-bucket-here/x/", "endpoint_url": s3_env}).json()
    assert api.client.post(f"/v1/sources/{missing['source_id']}/sync", headers=admin).status_code == 202
    failed = api.client.get(f"/v1/sources/{missing['source_id']}", headers=admin).json()
    assert "NoSuchBucket" in failed["last_sync_error"]

    assert api.client.post(f"/v1/sources/{source_id}/pause", headers=admin).json()["paused"] is True
    r = api.client.post(f"/v1/sources/{source_id}/sync", headers=admin)
    assert r.status_code == 409 and r.json()["error"]["code"] == "paused"
    assert api.client.delete(f"/v1/sources/{source_id}", headers=admin).status_code == 200
    assert api.client.get(f"/v1/sources/{source_id}", headers=admin).status_code == 404
    assert api.client.get("/v1/sources", headers=admin).json()["total"] == 1
