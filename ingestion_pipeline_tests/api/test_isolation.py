"""The isolation matrix: another tenant's ids are 404 everywhere, a `user` is 403 on every admin action."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from ingestion_pipeline.api.security import admin
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.sources import locations, registry

TXT = b"The acme widget weighs exactly 42 grams.\n" * 5


@pytest.fixture
def acme_objects(api, database, tmp_path):
    """One of each object for tenant acme: a file and document, a source, a metric upload, a presigned upload."""
    r = api.client.post("/v1/ingest", headers=api.as_("acme-user"), files={"file": ("w.txt", TXT, "text/plain")})
    assert r.status_code == 202, r.text
    file_id, doc_id = r.json()["file_id"], r.json()["doc_id"]
    with database.connection() as conn:
        source = registry.add_source(conn, "s3://acme-bucket/kb/", tenant_id="acme", name="acme-kb")
        conn.execute("INSERT INTO api_uploads (tenant_id, filename, content_type, size_bytes, bucket, object_key, "
                     "expires_at) VALUES ('acme', 'a.pdf', 'application/pdf', 10, 'b', 'k', now() + interval '1h')")
        upload_id = conn.execute("SELECT upload_id::text AS id FROM api_uploads").fetchone()["id"]
    export = write_export(tmp_path / "m.csv", "meta", daily_rows(1, 1, 2, 3))
    r = api.client.post("/v1/metrics/uploads", headers=api.as_("acme-user"), data={"platform": "meta"},
                        files={"file": ("m.csv", export.read_bytes(), "text/csv")})
    assert r.status_code == 202, r.text
    return {"file": file_id, "doc": doc_id, "source": source.source_id, "metric": r.json()["upload_id"],
            "upload": upload_id}


def _id_paths(ids: dict) -> list[tuple[str, str]]:
    return [
        ("GET", f"/v1/ingestion-runs/{ids['file']}"),
        ("GET", f"/v1/documents/{ids['doc']}"),
        ("POST", f"/v1/documents/{ids['doc']}/deactivate"),
        ("DELETE", f"/v1/documents/{ids['doc']}"),
        ("GET", f"/v1/sources/{ids['source']}"),
        ("POST", f"/v1/sources/{ids['source']}/pause"),
        ("POST", f"/v1/sources/{ids['source']}/resume"),
        ("POST", f"/v1/sources/{ids['source']}/sync"),
        ("DELETE", f"/v1/sources/{ids['source']}"),
        ("GET", f"/v1/metrics/uploads/{ids['metric']}"),
        ("GET", f"/v1/metrics/uploads/{ids['metric']}/errors"),
        ("POST", f"/v1/uploads/{ids['upload']}/complete"),
        ("POST", f"/v1/files/{ids['file']}/retry"),
        ("GET", f"/v1/documents/{ids['doc']}/chunks"),
        ("GET", f"/v1/documents/{ids['doc']}/pages/1/image"),
        ("GET", f"/v1/documents/{ids['doc']}/pages/1/layout"),
    ]


def test_another_tenants_ids_are_not_found(api, acme_objects):
    for method, path in _id_paths(acme_objects):
        r = api.client.request(method, path, headers=api.as_("globex-admin"))
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "not_found"
    # ...and the same ids answer for their own tenant (the 404s above are not just broken routes).
    assert api.client.get(f"/v1/ingestion-runs/{acme_objects['file']}", headers=api.as_("acme-user")).status_code == 200
    assert api.client.get(f"/v1/metrics/uploads/{acme_objects['metric']}",
                          headers=api.as_("acme-user")).status_code == 200
    assert api.client.get(f"/v1/sources/{acme_objects['source']}", headers=api.as_("acme-user")).status_code == 200


def test_lists_show_only_the_callers_tenant(api, acme_objects):
    for path in ("/v1/ingestion-runs", "/v1/sources", "/v1/metrics/uploads", "/v1/events", "/v1/documents"):
        body = api.client.get(path, headers=api.as_("globex-user")).json()
        assert body["total"] == 0 and body["items"] == [], path
    assert api.client.get("/v1/ingestion-runs", headers=api.as_("acme-user")).json()["total"] == 1
    assert api.client.get("/v1/metrics/uploads", headers=api.as_("acme-user")).json()["total"] == 1


def test_users_get_403_on_every_admin_action(api, acme_objects):
    ids = acme_objects
    admin_only = [
        ("POST", f"/v1/documents/{ids['doc']}/deactivate"), ("DELETE", f"/v1/documents/{ids['doc']}"),
        ("POST", "/v1/sources"), ("POST", f"/v1/sources/{ids['source']}/pause"),
        ("POST", f"/v1/sources/{ids['source']}/resume"), ("POST", f"/v1/sources/{ids['source']}/sync"),
        ("DELETE", f"/v1/sources/{ids['source']}"), ("POST", f"/v1/files/{ids['file']}/retry"),
        ("GET", "/v1/users"), ("POST", "/v1/users"), ("POST", "/v1/users/admin@acme.example/disable"),
    ]
    # Every route that needs the admin role is in the list above (a new one cannot be forgotten here).
    assert _admin_routes(api.client.app) == {(m, _template(p)) for m, p in admin_only}
    for method, path in admin_only:
        json_body = {"uri": "s3://x-bucket/p/"} if path == "/v1/sources" else (
            {"email": "z@acme.example", "password": "long enough pw"} if path == "/v1/users" else None)
        r = api.client.request(method, path, headers=api.as_("acme-user"), json=json_body)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "forbidden"
    # and the admin may
    assert api.client.post(f"/v1/sources/{acme_objects['source']}/pause",
                           headers=api.as_("acme-admin")).json()["paused"] is True


def test_source_endpoints_are_checked_against_the_allow_list(api):
    r = api.client.post("/v1/sources", headers=api.as_("acme-admin"),
                        json={"uri": "s3://kb-bucket/docs/", "endpoint_url": "http://169.254.169.254"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "endpoint_not_allowed"
    r = api.client.post("/v1/sources", headers=api.as_("acme-admin"), json={"uri": "http://not-s3/"})
    assert r.status_code == 400
    # a tenant names only the locations an operator bound to it (sources/locations.py)
    r = api.client.post("/v1/sources", headers=api.as_("acme-admin"), json={"uri": "s3://kb-bucket/docs/"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "location_not_bound"
    with api.services.db.connection() as conn:
        locations.bind(conn, "acme", locations.location("kb-bucket", "acme/"), by="test")
        locations.bind(conn, "globex", locations.location("kb-bucket", "globex/"), by="test")
    r = api.client.post("/v1/sources", headers=api.as_("acme-admin"), json={"uri": "s3://kb-bucket/acme/docs/"})
    assert r.status_code == 201 and r.json()["name"].startswith("acme-")
    # another tenant's prefix of the same bucket is refused; its own is not, and names do not collide
    r = api.client.post("/v1/sources", headers=api.as_("globex-admin"), json={"uri": "s3://kb-bucket/acme/docs/"})
    assert r.status_code == 403 and "not inside a location bound to the tenant" in r.json()["error"]["message"]
    r = api.client.post("/v1/sources", headers=api.as_("globex-admin"), json={"uri": "s3://kb-bucket/globex/docs/"})
    assert r.status_code == 201 and r.json()["name"].startswith("globex-")


def _needs_admin(dependant) -> bool:
    return any(d.call is admin or _needs_admin(d) for d in dependant.dependencies)


def _api_routes(routes):
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "include_context"):  # FastAPI keeps included routers as such
            yield from _api_routes(route.include_context.included_router.routes)


def _admin_routes(app) -> set[tuple[str, str]]:
    return {(method, route.path) for route in _api_routes(app.routes) if _needs_admin(route.dependant)
            for method in route.methods}


def _template(path: str) -> str:
    """/v1/sources/3/pause -> /v1/sources/{source_id}/pause (as the routes are declared)."""
    parts = path.split("/")
    names = {"documents": "{doc_id}", "sources": "{source_id}", "users": "{email}", "files": "{file_id}"}
    for i in range(1, len(parts) - 1):
        if parts[i] in names and parts[i + 1]:
            parts[i + 1] = names[parts[i]]
    return "/".join(parts)
