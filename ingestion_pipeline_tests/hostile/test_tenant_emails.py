"""An admin adding a user learns nothing about other tenants' users. Before: adding an address that a user of
another tenant had gave 409 with the address. Now addresses are unique per tenant (sql/023); a login finds
the account by address and password, and asks for the tenant only when the pair signs in to several."""

import pytest

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
def test_the_password_picks_the_account(api, tenant, password):
    _add(api, "acme-admin", "acme password 1")
    _add(api, "globex-admin", "globex password 2")
    token = _login(api, password)
    assert token.status_code == 200
    documents = api.client.get("/v1/documents", headers={"Authorization": f"Bearer {token.json()['access_token']}"})
    assert documents.status_code == 200
    me = [u for u in api.client.get("/v1/users", headers=api.as_(f"{tenant}-admin")).json() if u["email"] == ADDRESS]
    assert len(me) == 1 and me[0]["tenant_id"] == tenant
    assert _login(api, "wrong password").status_code == 401


def test_the_same_pair_in_two_tenants_needs_the_tenant(api):
    _add(api, "acme-admin", "the same password")
    _add(api, "globex-admin", "the same password")
    ambiguous = _login(api, "the same password")
    assert ambiguous.status_code == 400 and ambiguous.json()["error"]["code"] == "tenant_required"
    assert _login(api, "the same password", tenant="globex").status_code == 200
