"""An admin adding a user learns nothing about other tenants' users. Before: adding an address that a user of
another tenant had gave 409 with the address. Now addresses are unique per tenant (sql/023). A login without a
tenant signs in to the address's only account; an address of several tenants names its tenant. Trying each
tenant's hash in turn made a login's time say how many tenants hold an address: every login is one hash."""

import bcrypt
import pytest

from ingestion_pipeline.core import users

ADDRESS = "shared@example.org"


def _add(api, admin: str, password: str):
    return api.client.post("/v1/users", json={"email": ADDRESS, "password": password}, headers=api.as_(admin))


def _login(api, password: str, tenant: str | None = None):
    body = {"email": ADDRESS, "password": password, **({"tenant_id": tenant} if tenant else {})}
    return api.client.post("/v1/auth/token", json=body)


def test_an_address_in_another_tenant_is_not_disclosed(api):
    assert _add(api, "acme-admin", "acme password 1").status_code == 201
    other = _add(api, "globex-admin", "globex password 2")
    assert other.status_code == 201, other.text  # no 409: globex's admin learns nothing about acme
    same = _add(api, "acme-admin", "another password")
    assert same.status_code == 409 and "in this tenant" in same.json()["error"]["message"]


@pytest.mark.parametrize("tenant,password", [("acme", "acme password 1"), ("globex", "globex password 2")])
def test_an_address_of_two_tenants_signs_in_naming_its_tenant(api, tenant, password):
    _add(api, "acme-admin", "acme password 1")
    _add(api, "globex-admin", "globex password 2")
    token = _login(api, password, tenant=tenant)
    assert token.status_code == 200
    documents = api.client.get("/v1/documents", headers={"Authorization": f"Bearer {token.json()['access_token']}"})
    assert documents.status_code == 200
    me = [u for u in api.client.get("/v1/users", headers=api.as_(f"{tenant}-admin")).json() if u["email"] == ADDRESS]
    assert len(me) == 1 and me[0]["tenant_id"] == tenant
    assert _login(api, "wrong password", tenant=tenant).status_code == 401
    assert _login(api, "globex password 2" if tenant == "acme" else "acme password 1", tenant=tenant).status_code == 401


def test_without_a_tenant_an_address_of_several_tenants_is_answered_as_a_wrong_password(api):
    _add(api, "acme-admin", "the same password")
    nobody = api.client.post("/v1/auth/token", json={"email": "nobody@example.org", "password": "the same password"})
    assert _login(api, "the same password").status_code == 200  # the address's only account
    _add(api, "globex-admin", "the same password")
    several = _login(api, "the same password")
    assert (several.status_code, several.json()) == (nobody.status_code, nobody.json()) == (401, nobody.json())
    assert "tenant_id" in several.json()["error"]["message"]
    assert _login(api, "the same password", tenant="globex").status_code == 200


@pytest.mark.parametrize("tenants", [0, 1, 2, 5])
def test_a_login_costs_one_hash_however_many_tenants_hold_the_address(database, monkeypatch, tenants):
    checked: list[bytes] = []
    checkpw = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda password, hashed: checked.append(hashed) or checkpw(password, hashed))
    with database.connection() as conn:
        for n in range(tenants):
            conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (f"t{n}",))
            users.add_user(conn, ADDRESS, tenant_id=f"t{n}", role="user", password=f"password number {n}")
        checked.clear()
        user = users.authenticate(conn, ADDRESS, "password number 0")
        assert len(checked) == 1
        assert (user is not None) is (tenants == 1)
        if tenants:
            checked.clear()
            assert users.authenticate(conn, ADDRESS, "password number 0", tenant_id="t0").tenant_id == "t0"
            assert len(checked) == 1
