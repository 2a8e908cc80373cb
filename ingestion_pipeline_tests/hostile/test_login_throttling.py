"""Failed logins slow a guesser without locking the owner out, and one tenant's account forgives nothing of
another's. Failures count per client address and per (client address, account) pair, an account being one
tenant's user; a pair past its free failures waits a delay that doubles with each further failure. The client
address is the connection's peer unless that peer is a configured trusted proxy, and a row keeps an HMAC under a
key of the deployment's secret, never a plain digest of the address or the email.

Time is not waited for: the failures' times (the database's clock) are moved back instead."""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from ingestion_pipeline.api import login_guard
from ingestion_pipeline.api import server as api_server
from ingestion_pipeline.api.app import create_app
from ingestion_pipeline.api.routes import auth
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core.login_failures import FailureLimits
from ingestion_pipeline.core.settings import ApiSettings, load_api_settings, load_settings
from ingestion_pipeline_tests.api.conftest import PASSWORD, SECRET, _free_port, make_api
from ingestion_pipeline_tests.helpers import shared_embedder

OTHER_SECRET = "another-secret-that-is-long-enough-9876543210"


@pytest.fixture(autouse=True)
def _no_refusal_pause(monkeypatch):
    monkeypatch.setattr(auth, "REFUSAL_PAUSE_SECONDS", 0.0)


@pytest.fixture
def long_first_delay(monkeypatch):
    """A first delay of a minute for tests that assert a pair is still in its delay a few logins later: a
    password check runs at the lowest CPU priority, and on a loaded machine a few of them took the default 5 s."""
    monkeypatch.setattr(login_guard, "FailureLimits", functools.partial(FailureLimits, first_delay_seconds=60.0))
    return 60.0


def _from(app_or_api, address: str) -> TestClient:
    """A client of the same app whose connections come from ``address``."""
    app = app_or_api.client.app if hasattr(app_or_api, "client") else app_or_api
    return TestClient(app, client=(address, 50000))


def _login(client, email: str, password: str, tenant: str | None = None, **kwargs) -> httpx.Response:
    body = {"email": email, "password": password, **({"tenant_id": tenant} if tenant else {})}
    return client.post("/v1/auth/token", json=body, **kwargs)


def _backdate(database, seconds: float) -> None:
    """Every failure so far happened ``seconds`` earlier: the delays pass without being waited for."""
    with database.connection() as conn:
        conn.execute("UPDATE login_failures SET failed_at = failed_at - make_interval(secs => %s)", (seconds,))


def test_signing_in_to_a_twin_in_another_tenant_forgives_nothing_of_the_account(database, long_first_delay):
    api = make_api(database, ApiSettings(jwt_secret=SECRET, login_failures_per_account=3))
    # globex's admin gives one of its users acme's admin's email, with a password it knows
    twin = api.client.post("/v1/users", headers=api.as_("globex-admin"),
                           json={"email": "admin@acme.example", "password": "the twin's password"})
    assert twin.status_code == 201
    attacker = _from(api, "10.1.0.1")
    guesses = []
    for round_ in range(3):
        guesses += [_login(attacker, "admin@acme.example", f"guess {round_}{n}", tenant="acme").status_code
                    for n in range(2)]
        assert _login(attacker, "admin@acme.example", "the twin's password", tenant="globex").status_code == 200
    # the twin's sign-ins cleared only the twin's failures: acme's account is in its delay after its third
    assert guesses == [401, 401, 401, 429, 429, 429]
    # naming no tenant is another way of asking, with its own count; signing in to the twin that way (the email
    # names two accounts) forgives nothing of it
    assert [_login(attacker, "admin@acme.example", f"no tenant {n}").status_code for n in range(3)] == [401] * 3
    _backdate(database, long_first_delay + 1)  # past the first delay
    assert _login(attacker, "admin@acme.example", "the twin's password").status_code == 200
    assert [_login(attacker, "admin@acme.example", f"no tenant {n}").status_code for n in (3, 4)] == [401, 429]


@pytest.mark.parametrize("email", ["admin@acme.example", "nobody@acme.example"], ids=["an account", "no account"])
def test_asking_with_and_without_a_tenant_share_no_count_whether_or_not_the_email_exists(database, email,
                                                                                      long_first_delay):
    """A count shared between "no tenant" and "tenant acme" only when the email is acme's would tell a guesser
    which emails exist in which tenant: the answers are the same for an account and for no account."""
    api = make_api(database, ApiSettings(jwt_secret=SECRET, login_failures_per_account=3))
    probe = _from(api, "10.9.0.1")
    assert [_login(probe, email, f"wrong {n}").status_code for n in range(3)] == [401] * 3
    assert _login(probe, email, "wrong again", tenant="acme").status_code == 401
    assert _login(probe, email, "wrong once more").status_code == 429


def test_wrong_passwords_from_ten_addresses_leave_the_owner_signing_in_from_theirs(database):
    api = make_api(database, ApiSettings(jwt_secret=SECRET))  # the default limits
    for n in range(10):
        assert _login(_from(api, f"10.2.0.{n}"), "admin@acme.example", f"wrong password {n}").status_code == 401
    assert _login(_from(api, "192.0.2.10"), "admin@acme.example", PASSWORD).status_code == 200


def test_a_guesser_waits_a_doubling_delay_told_in_retry_after(database):
    api = make_api(database, ApiSettings(jwt_secret=SECRET, login_failures_per_account=3))
    attacker = _from(api, "10.3.0.1")

    def guess():
        return _login(attacker, "user@acme.example", "wrong password")

    assert [guess().status_code for _ in range(3)] == [401, 401, 401]  # the pair's free failures
    waits = []
    for _ in range(4):
        refused = guess()
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_logins"
        waits.append(int(refused.headers["Retry-After"]))
        _backdate(database, waits[-1])
        assert guess().status_code == 401  # allowed once the delay has passed: one guess, and a longer delay
    assert waits == [5, 10, 20, 40]
    assert _login(_from(api, "192.0.2.20"), "user@acme.example", PASSWORD).status_code == 200


def test_the_delay_doubles_up_to_the_window():
    limits = FailureLimits(per_address=20, per_pair=3, window_seconds=300, first_delay_seconds=5)
    assert [limits.delay(n) for n in range(12)] == [0, 0, 0, 5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert limits.delay(10_000) == 300


def test_the_owner_signing_in_forgives_nothing_of_a_guesser_elsewhere(database, long_first_delay):
    api = make_api(database, ApiSettings(jwt_secret=SECRET, login_failures_per_account=3))
    attacker, owner = _from(api, "10.5.0.1"), _from(api, "192.0.2.30")
    assert [_login(attacker, "user@acme.example", "wrong password").status_code for _ in range(4)] == \
        [401, 401, 401, 429]
    assert _login(owner, "user@acme.example", PASSWORD).status_code == 200
    assert _login(attacker, "user@acme.example", "wrong password").status_code == 429


def test_an_ipv6_client_counts_by_its_64(database, long_first_delay):
    """One host is given a whole /64: its addresses are one client, or it would have 2^64 of them."""
    api = make_api(database, ApiSettings(jwt_secret=SECRET, login_failures_per_account=1))
    assert _login(_from(api, "2001:db8:1:2::1"), "user@acme.example", "wrong password").status_code == 401
    assert _login(_from(api, "2001:db8:1:2:ffff::9"), "user@acme.example", "wrong password").status_code == 429
    assert _login(_from(api, "2001:db8:1:3::1"), "user@acme.example", "wrong password").status_code == 401


def test_a_row_keeps_a_keyed_digest_not_a_plain_one(database):
    email, address = "admin@acme.example", "10.6.0.1"
    api = make_api(database, ApiSettings(jwt_secret=SECRET))
    other_app = create_app(ApiServices(database, load_settings(), ApiSettings(jwt_secret=OTHER_SECRET),
                                       embedder=shared_embedder()))
    kept = {}
    for name, app in (("secret", api.client.app), ("other secret", other_app)):
        assert _login(_from(app, address), email, "wrong password").status_code == 401
        with database.connection() as conn:
            rows = conn.execute("DELETE FROM login_failures RETURNING subject").fetchall()
        kept[name] = {bytes(row["subject"]) for row in rows}
        assert len(kept[name]) == 2 and all(len(s) == 32 for s in kept[name])  # the address, the pair
    plain = {hashlib.sha256(value.encode()).digest() for value in (email, address)}
    assert not plain & (kept["secret"] | kept["other secret"])
    assert not kept["secret"] & kept["other secret"]  # without the secret, a row matches nothing


@contextmanager
def _serving(api, api_settings: ApiSettings) -> Iterator[str]:
    """The app on a real uvicorn, configured as ``serve`` configures it, on a 127.0.0.1 port."""
    port = _free_port()
    server = uvicorn.Server(api_server.uvicorn_config(create_app(api.services), "127.0.0.1", port, api_settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def _peer(address: str) -> httpx.Client:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is this host's loopback)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def test_x_forwarded_for_is_not_believed_without_trusted_proxies(database, long_first_delay):
    settings = ApiSettings(jwt_secret=SECRET, login_failures_per_account=1)
    api = make_api(database, settings)
    with _serving(api, settings) as url, _peer("127.0.0.1") as client:
        codes = [client.post(f"{url}/v1/auth/token", json={"email": "user@acme.example", "password": "wrong pw"},
                             headers={"X-Forwarded-For": f"10.7.0.{n}"}).status_code for n in range(3)]
    # every claim is the same client, 127.0.0.1: its second guess waits, whatever address it says it has
    assert codes == [401, 429, 429]


def test_x_forwarded_for_is_believed_from_a_trusted_proxy_only(database, long_first_delay):
    settings = ApiSettings(jwt_secret=SECRET, login_failures_per_account=1, trusted_proxies=("127.0.0.1/32",))
    api = make_api(database, settings)

    def guess(client: httpx.Client, url: str, forwarded: str | None) -> int:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        return client.post(f"{url}/v1/auth/token", headers=headers,
                           json={"email": "user@acme.example", "password": "wrong password"}).status_code

    with _serving(api, settings) as url, _peer("127.0.0.1") as proxy, _peer("127.0.0.2") as direct:
        # through the proxy: each client is the address it forwards
        assert guess(proxy, url, "10.8.0.1") == 401
        assert guess(proxy, url, "10.8.0.1") == 429
        assert guess(proxy, url, "10.8.0.2") == 401
        # a client's own X-Forwarded-For entries, forwarded by the proxy, are not believed: the proxy appends
        # the address it saw, and that (the rightmost entry not itself a proxy) is the client
        assert guess(proxy, url, "10.8.0.99, 10.8.0.1") == 429
        assert guess(proxy, url, "10.8.0.1, 10.8.0.3") == 401
        # straight from another peer, the header is ignored: 127.0.0.2 is the client whatever it claims
        assert guess(direct, url, "10.8.0.4") == 401
        assert guess(direct, url, "10.8.0.5") == 429


def test_serve_believes_forwarded_headers_only_when_proxies_are_named(monkeypatch):
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # uvicorn's own variable changes nothing
    off = api_server.uvicorn_config(object(), "127.0.0.1", 1, ApiSettings(jwt_secret=SECRET))
    assert off.proxy_headers is False
    monkeypatch.setenv("INGESTION_API_TRUSTED_PROXIES", " 10.0.0.0/8, 192.0.2.7 ,fd00::/8")
    named = load_api_settings()
    assert named.trusted_proxies == ("10.0.0.0/8", "192.0.2.7/32", "fd00::/8")
    on = api_server.uvicorn_config(object(), "127.0.0.1", 1, named)
    assert on.proxy_headers is True and on.forwarded_allow_ips == list(named.trusted_proxies)


@pytest.mark.parametrize("value", ["*", "0.0.0.0/0", "10.0.0.1, ::/0", "proxy.internal", "10.0.0.0/33",
                                   "127.0.0.1;10.0.0.1"])
def test_a_trusted_proxy_is_an_address_or_a_network(value, monkeypatch):
    monkeypatch.setenv("INGESTION_API_TRUSTED_PROXIES", value)
    with pytest.raises(ValueError, match="INGESTION_API_TRUSTED_PROXIES must be"):
        load_api_settings()
