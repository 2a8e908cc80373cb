"""An unauthenticated login flood cannot starve other tenants: the hash holds no database connection, hashes
at once are bounded, failures are throttled per address and per (address, account) pair with 429 and
Retry-After (test_login_throttling.py: how the owner is never locked out).

Before: 200 wrong passwords 32 at a time ran bcrypt while each held a connection of the 8-connection pool;
other tenants' requests took p50 ≈ 5 s and got 503 ``database_unavailable``; no throttling."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ingestion_pipeline.api.login_guard import LoginGuard, LoginRefused
from ingestion_pipeline.core import login_failures
from ingestion_pipeline_tests.api.conftest import PASSWORD, start_server, user_token


def _backdate(conn, seconds: float) -> None:
    """Every failure recorded so far happened ``seconds`` earlier (the window is the database's clock)."""
    conn.execute("UPDATE login_failures SET failed_at = failed_at - make_interval(secs => %s)", (seconds,))


def test_failures_are_counted_per_address_and_pair_in_a_window(database):
    guard = LoginGuard(per_address=5, per_pair=3, window_seconds=60, key=login_failures.derive_key("k" * 32))
    victim = [login_failures.account("acme", "1")]
    with database.connection() as conn:
        for _ in range(3):
            guard.check(conn, "10.0.0.1", victim)
            guard.record(conn, "10.0.0.1", victim)
        _backdate(conn, 3)
        with pytest.raises(LoginRefused) as refused:  # the pair waits its first delay from its last failure
            guard.check(conn, "10.0.0.1", victim)
        assert refused.value.retry_after == 2
        guard.check(conn, "10.0.0.9", victim)  # the account from another address: not refused
        guard.check(conn, "10.0.0.1", [login_failures.account("acme", "2")])  # the address has 3 of its 5
        for n in range(2):
            guard.record(conn, "10.0.0.1", [login_failures.account("acme", f"x{n}")])
        with pytest.raises(LoginRefused) as refused:
            guard.check(conn, "10.0.0.1", [login_failures.account("acme", "new")])
        assert 55 <= refused.value.retry_after <= 57  # the oldest failure (3 s ago) leaves the 60 s window
        _backdate(conn, 60)
        guard.check(conn, "10.0.0.1", victim)  # the window moved on
        guard.record(conn, "10.0.0.2", victim)
        guard.record(conn, "10.0.0.2", victim, succeeded=True, forgive=victim[0])  # clears its own pair
        assert conn.execute("SELECT count(*) AS n FROM login_failures WHERE scope = 'pair' AND failed_at > "
                            "clock_timestamp() - interval '10 seconds'").fetchone()["n"] == 0
        # what a row keeps is a keyed digest, never the address or the email
        kept = conn.execute("SELECT string_agg(encode(subject, 'escape'), '') AS s FROM login_failures").fetchone()
        assert "acme" not in kept["s"] and "10.0.0" not in kept["s"]


def test_failures_that_left_the_window_are_swept(database, monkeypatch):
    from ingestion_pipeline.api import login_guard

    guard = LoginGuard(window_seconds=60)
    with database.connection() as conn:
        for n in range(50):  # a flood of distinct addresses and emails
            guard.record(conn, f"10.0.0.{n}", [f"u{n}@x.example"])
        _backdate(conn, 61)
        monkeypatch.setattr(login_guard, "SWEEP_EVERY_SECONDS", 0.0)
        guard.record(conn, "10.0.1.1", ["last@x.example"])
        assert conn.execute("SELECT count(*) AS n FROM login_failures").fetchone()["n"] == 2  # the last one's


def test_too_many_waiting_hashes_are_refused_not_queued():
    guard = LoginGuard(concurrent=1)
    guard._waiting = guard.max_waiting
    with pytest.raises(LoginRefused, match="too many logins at once"), guard.hashing():
        pass


def test_one_address_cannot_hold_every_password_check():
    """Successes are not throttled, so an address signing in in a loop held both checks and the waiting room:
    everyone else got 429. One address may hold all checks but one."""
    guard = LoginGuard(concurrent=2)
    with guard.hashing("10.0.0.1"):
        with pytest.raises(LoginRefused, match="from this address"), guard.hashing("10.0.0.1"):
            pass
        with guard.hashing("10.0.0.2"):  # another address still gets the other check
            pass
    with guard.hashing("10.0.0.1"):  # released: the address may check again
        pass
    assert not guard._in_flight


@pytest.mark.integration
def test_a_flood_of_wrong_passwords_leaves_other_tenants_served(database_url, tmp_path):
    with start_server(database_url, tmp_path, INGESTION_API_LOGIN_FAILURES_PER_ADDRESS="1000",
                      INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT="1000") as server:
        other = {"Authorization": f"Bearer {user_token(database_url, 'globex', 'reader@globex.example')}"}
        user_token(database_url, "acme", "victim@acme.example")

        def wrong(n: int) -> int:
            return httpx.post(f"{server.url}/v1/auth/token", timeout=60,
                              json={"email": "victim@acme.example", "password": f"wrong-{n}"}).status_code

        def read(_: int) -> int:
            return httpx.get(f"{server.url}/v1/documents", headers=other, timeout=60).status_code

        with ThreadPoolExecutor(32) as flood, ThreadPoolExecutor(4) as readers:
            attack = [flood.submit(wrong, n) for n in range(120)]
            reads = list(readers.map(read, range(40)))
            codes = [f.result() for f in attack]
        assert set(reads) == {200}, reads  # no 503: the flood held no database connection
        assert set(codes) <= {401, 429} and 429 in codes  # more than 2 + 8 at once are told to come back
        # the real password still signs in once the flood is over
        ok = httpx.post(f"{server.url}/v1/auth/token", json={"email": "victim@acme.example", "password": PASSWORD})
        assert ok.status_code == 200


@pytest.mark.integration
def test_repeated_failures_get_429_with_retry_after(database_url, tmp_path):
    with start_server(database_url, tmp_path, INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT="3") as server:
        user_token(database_url, "acme", "victim@acme.example")
        answers = [httpx.post(f"{server.url}/v1/auth/token", timeout=30,
                              json={"email": "victim@acme.example", "password": "wrong-password"})
                   for _ in range(4)]
        assert [a.status_code for a in answers] == [401, 401, 401, 429]
        assert answers[3].json()["error"]["code"] == "too_many_logins"
        assert 1 <= int(answers[3].headers["Retry-After"]) <= 5  # the pair's first delay
        # from this address even the right password waits: the (address, account) pair is throttled, not the guess
        assert httpx.post(f"{server.url}/v1/auth/token", json={"email": "victim@acme.example",
                                                                "password": PASSWORD}).status_code == 429


@pytest.mark.integration
def test_failures_count_across_api_processes(database_url, tmp_path):
    """Two API processes on one database (two replicas behind a load balancer): guesses spread over both are
    counted together, so the fourth of a limit of three is refused on either."""
    limits = {"INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT": "3"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with start_server(database_url, tmp_path / "a", **limits) as one, \
            start_server(database_url, tmp_path / "b", **limits) as two:
        user_token(database_url, "acme", "victim@acme.example")
        codes = [httpx.post(f"{server.url}/v1/auth/token", timeout=30,
                            json={"email": "victim@acme.example", "password": "wrong-password"}).status_code
                 for server in (one, two, one, two, one)]
        assert codes == [401, 401, 401, 429, 429]
