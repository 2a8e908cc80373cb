"""Rules the server enforces are stated in its OpenAPI document, so clients can rely on them; an admin cannot
disable itself, and a disabled user's token stops working."""

from __future__ import annotations

import time

from ingestion_pipeline.api import services as api_services


def test_the_schema_states_the_rules_the_server_enforces(api):
    spec = api.client.get("/openapi.json").json()
    form = spec["paths"]["/v1/ingest"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert "must end in one of: .docx, .eml," in form["properties"]["file"]["description"]
    assert form["properties"]["key"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"
    metrics = spec["paths"]["/v1/metrics/uploads"]["post"]
    assert ".csv, .json, .jsonl, .ndjson" in metrics["requestBody"]["content"]["multipart/form-data"]["schema"][
        "properties"]["file"]["description"]
    for path in ("/v1/ingest", "/v1/metrics/uploads"):
        assert {"408", "429", "503"} <= set(spec["paths"][path]["post"]["responses"])
    since = next(p for p in spec["paths"]["/v1/events"]["get"]["parameters"] if p["name"] == "since")
    assert since["schema"]["anyOf"][0]["pattern"].startswith("^\\d{4}-")
    components = spec["components"]["schemas"]
    assert "72 bytes" in components["UserIn"]["properties"]["password"]["description"]
    assert "INGESTION_ALLOWED_S3_ENDPOINTS" in str(components["SourceIn"]["properties"]["endpoint_url"])


def test_the_rules_hold(api):
    admin = api.as_("acme-admin")
    number = api.client.get("/v1/events", params={"since": "0.5"}, headers=admin)
    assert number.status_code == 400 and "since" in number.text  # no longer read as a Unix time
    assert api.client.get("/v1/events", params={"since": "2026-13-40"}, headers=admin).status_code == 400
    assert api.client.get("/v1/events", params={"since": "2026-11-28T10:00:00Z"}, headers=admin).status_code == 200
    long_password = "é" * 40  # 40 characters, 80 bytes
    created = api.client.post("/v1/users", json={"email": "new@acme.example", "password": long_password},
                              headers=admin)
    assert created.status_code == 400 and "72 bytes" in created.text


def test_an_admin_cannot_disable_itself_and_a_disabled_users_token_stops(api, monkeypatch):
    monkeypatch.setattr(api_services, "ACTIVE_CHECK_SECONDS", 0.2)
    admin, user = api.as_("acme-admin"), api.as_("acme-user")
    emails = {u["role"]: u["email"] for u in api.client.get("/v1/users", headers=admin).json()}
    refused = api.client.post(f"/v1/users/{emails['admin']}/disable", headers=admin)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "cannot_disable_self"
    assert api.client.get("/v1/documents", headers=user).status_code == 200
    assert api.client.post(f"/v1/users/{emails['user']}/disable", headers=admin).status_code == 200
    time.sleep(0.3)
    after = api.client.get("/v1/documents", headers=user)
    assert after.status_code == 401 and after.json()["error"]["code"] == "account_disabled"
