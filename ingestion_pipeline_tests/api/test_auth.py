"""Tokens: issued for the right password only; forged, expired, `alg: none` or incomplete ones refused."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest

from ingestion_pipeline.api.server import check_startup
from ingestion_pipeline.core import users
from ingestion_pipeline.core.access_tokens import Principal, issue_token
from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline_tests.api.conftest import PASSWORD, SECRET


def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def test_token_has_the_claims_and_expiry(api):
    r = api.client.post("/v1/auth/token", json={"email": "USER@acme.example", "password": PASSWORD})
    assert r.status_code == 200
    body = r.json()
    assert body["token_type"] == "bearer" and body["expires_in"] == 24 * 3600
    claims = jwt.decode(body["access_token"], SECRET, algorithms=["HS256"])
    assert claims["tenant_id"] == "acme" and claims["role"] == "user"
    assert claims["exp"] - claims["iat"] == 24 * 3600 and claims["sub"]


def test_wrong_password_and_unknown_email_look_the_same(api):
    timings = {}
    bodies = {}
    for name, email in (("wrong", "admin@acme.example"), ("unknown", "nobody@acme.example")):
        started = time.perf_counter()
        r = api.client.post("/v1/auth/token", json={"email": email, "password": "not the password"})
        timings[name] = time.perf_counter() - started
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        bodies[name] = r.json()
    assert bodies["wrong"] == bodies["unknown"]
    # Both pay one bcrypt check (cost 12): similar time, not a fast path for unknown emails.
    assert min(timings.values()) > 0.05, timings


def test_a_disabled_user_gets_no_token(api, database):
    with database.connection() as conn:
        users.disable_user(conn, "user@acme.example")
    r = api.client.post("/v1/auth/token", json={"email": "user@acme.example", "password": PASSWORD})
    assert r.status_code == 401


@pytest.mark.parametrize("case", ["missing", "garbage", "bad_signature", "expired", "alg_none", "hs512",
                                  "no_tenant", "no_exp", "wrong_scheme"])
def test_bad_tokens_get_401_with_a_bearer_challenge(api, case):
    now = int(time.time())
    claims = {"sub": "u", "tenant_id": "acme", "role": "admin", "iat": now, "exp": now + 60}
    headers = {
        "missing": {},
        "garbage": {"Authorization": "Bearer not.a.token"},
        "bad_signature": {"Authorization": "Bearer " + jwt.encode(claims, "another-secret-of-enough-length-000000",
                                                                  algorithm="HS256")},
        "expired": {"Authorization": "Bearer " + issue_token(Principal("u", "acme", "admin"), SECRET,
                                                             expiry_seconds=60, now=now - 3600)},
        "alg_none": {"Authorization": f"Bearer {_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."},
        "hs512": {"Authorization": "Bearer " + jwt.encode(claims, SECRET * 2, algorithm="HS512")},
        "no_tenant": {"Authorization": "Bearer " + jwt.encode({k: v for k, v in claims.items() if k != "tenant_id"},
                                                              SECRET, algorithm="HS256")},
        "no_exp": {"Authorization": "Bearer " + jwt.encode({k: v for k, v in claims.items() if k != "exp"},
                                                           SECRET, algorithm="HS256")},
        "wrong_scheme": {"Authorization": "Basic " + base64.b64encode(b"admin@acme.example:x").decode()},
    }[case]
    for path in ("/v1/documents", "/v1/ingestion-runs", "/v1/sources"):
        r = api.client.get(path, headers=headers)
        assert r.status_code == 401, (case, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert set(r.json()["error"]) == {"code", "message"}


def test_health_needs_no_token(api):
    assert api.client.get("/healthz").json()["status"] == "ok"
    assert api.client.get("/readyz").json()["status"] == "ready"
    assert api.client.get("/docs").status_code == 200
    assert "/v1/ingest" in api.client.get("/openapi.json").json()["paths"]


def test_server_refuses_to_start_without_a_strong_secret_or_with_open_dev_mode():
    with pytest.raises(ValueError, match="JWT_SECRET"):
        check_startup(ApiSettings(jwt_secret=None), "127.0.0.1")
    with pytest.raises(ValueError, match="32 bytes"):
        check_startup(ApiSettings(jwt_secret="short"), "127.0.0.1")
    check_startup(ApiSettings(jwt_secret=SECRET), "0.0.0.0")
    check_startup(ApiSettings(auth_enabled=False), "127.0.0.1")
    with pytest.raises(ValueError, match="loopback"):
        check_startup(ApiSettings(auth_enabled=False), "0.0.0.0")


def test_development_mode_takes_the_tenant_from_the_query(database):
    from fastapi.testclient import TestClient

    from ingestion_pipeline.api.app import create_app
    from ingestion_pipeline.api.services import ApiServices
    from ingestion_pipeline.core.settings import load_settings

    client = TestClient(create_app(ApiServices(database, load_settings(), ApiSettings(auth_enabled=False))))
    assert client.get("/v1/documents").status_code == 401
    assert client.get("/v1/documents?tenant_id=acme").json()["total"] == 0
    assert client.post("/v1/auth/token", json={"email": "a@b.c", "password": "x"}).status_code == 400


def test_users_are_managed_by_admins_of_their_own_tenant(api):
    r = api.client.post("/v1/users", headers=api.as_("acme-admin"),
                        json={"email": "new@acme.example", "password": "long enough pw", "role": "user"})
    assert r.status_code == 201 and r.json()["tenant_id"] == "acme"
    assert api.client.post("/v1/users", headers=api.as_("acme-user"),
                           json={"email": "x@acme.example", "password": "long enough pw"}).status_code == 403
    emails = [u["email"] for u in api.client.get("/v1/users", headers=api.as_("globex-admin")).json()]
    assert "new@acme.example" not in emails and set(emails) == {"admin@globex.example", "user@globex.example"}
    assert api.client.post("/v1/users/new@acme.example/disable", headers=api.as_("globex-admin")).status_code == 404
    assert api.client.post("/v1/users/new@acme.example/disable", headers=api.as_("acme-admin")).json()["disabled"]
    dup = api.client.post("/v1/users", headers=api.as_("acme-admin"),
                          json={"email": "new@acme.example", "password": "long enough pw"})
    assert dup.status_code == 409


def test_method_not_allowed_lists_every_method_of_the_path(api):
    r = api.client.request("OPTIONS", "/v1/users", headers=api.as_("acme-admin"))
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    r = api.client.put("/v1/documents/1", headers=api.as_("acme-admin"))
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET"
    assert r.json()["error"]["code"] == "method_not_allowed"
