"""Sources over the API against a moto S3 server: add, sync now, see the outcome, pause, remove."""

from __future__ import annotations

from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline.sources import locations
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.helpers import table


def test_add_sync_pause_remove(database, db, bucket, s3_env):
    client, name = bucket
    client.put_object(Bucket=name, Key="kb/a.md", Body=b"# A\n\nAlpha facts.\n")
    client.put_object(Bucket=name, Key="kb/b.txt", Body=b"Beta facts.\n")
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    admin = api.as_("acme-admin")
    with database.connection() as conn:  # the operator's act: what acme's requests may name
        locations.bind(conn, "acme", locations.location(name, "kb/", s3_env), by="test")
        locations.bind(conn, "acme", locations.location("no-such-bucket-here", "", s3_env), by="test")
    r = api.client.post("/v1/sources", headers=admin, json={"uri": f"s3://{name}/kb/", "endpoint_url": s3_env})
    assert r.status_code == 201, r.text
    source_id = r.json()["source_id"]

    r = api.client.post(f"/v1/sources/{source_id}/sync", headers=admin)
    assert r.status_code == 202 and r.json()["status"] == "started"
    after = api.client.get(f"/v1/sources/{source_id}", headers=api.as_("acme-user")).json()
    assert after["last_sync_at"] and after["last_sync_error"] is None
    assert after["queued_objects"] == 2 and after["passes_completed"] == 1
    assert len(table(db, "SELECT file_id FROM ingestion_runs WHERE tenant_id = 'acme'")) == 2

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


def test_a_burst_of_sync_requests_lists_each_source_once_at_a_time_and_keeps_connections_for_requests(
        database, bucket, s3_env, monkeypatch):
    """Each "sync now" listing holds two pooled connections; a burst used to take all eight and the next
    request got 503 (schemathesis found it). Now: one listing per source at a time, two at once."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from ingestion_pipeline.api.routes import sources as sources_route

    _, name = bucket
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    admin = api.as_("acme-admin")
    with database.connection() as conn:
        locations.bind(conn, "acme", locations.location(name, "", s3_env), by="test")
    ids = [api.client.post("/v1/sources", headers=admin,
                           json={"uri": f"s3://{name}/p{i}/", "endpoint_url": s3_env}).json()["source_id"]
           for i in range(4)]
    running: list[str] = []
    peak = []
    lock = threading.Lock()

    def slow_sync(db, settings, s3_client_for, metric_store, *, names):
        with lock:
            running.append(names[0])
            peak.append((len(running), len(set(running)) == len(running)))
        time.sleep(0.3)
        with lock:
            running.remove(names[0])
        return []

    monkeypatch.setattr(sources_route, "sync_sources", slow_sync)
    with ThreadPoolExecutor(16) as pool:  # the test client runs each request's background task in its thread
        answers = list(pool.map(lambda i: api.client.post(f"/v1/sources/{ids[i % 4]}/sync", headers=admin),
                                range(16)))
    assert {r.status_code for r in answers} == {202}
    statuses = [r.json()["status"] for r in answers]
    assert statuses.count("started") >= 4 and "already_running" in statuses
    assert max(n for n, _ in peak) <= 2 and all(distinct for _, distinct in peak)
    assert api.client.get("/v1/sources", headers=admin).status_code == 200
