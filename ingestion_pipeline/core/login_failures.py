"""Failed logins, counted in Postgres so that every API process and host sees the same counts.

Throttling that each process kept for itself gave a client as many guesses as there are API replicas behind
the load balancer; in the database, a failure is counted wherever it was sent. The time is the database's
(``clock_timestamp()``), so hosts whose clocks differ still agree. Two counts, of failures within the window:

- **per client address**, whatever the account: ``per_address`` of them, and that address is refused until the
  oldest leaves the window. It stops one address trying many accounts.
- **per (client address, account) pair**: past ``per_pair`` of them, each further try from that address for
  that account waits a delay from the pair's last failure that doubles with each failure (``FailureLimits.delay``).
  Nothing counts per account alone: guesses from any number of other addresses never refuse the owner at their
  own, and a success forgives only its own pair.

An account is one tenant's user: emails are unique per tenant only. Failures count against the login as asked
(the tenant named, or none, and the email), never against what it matched, so no count is shared between two
ways of asking and the answers say nothing about which emails exist in which tenant; a success clears the
pair's count only when the login named a single account, so signing in to another tenant's twin of the email
forgives nothing. An IPv6 client counts
by its /64 (a host is commonly given a whole /64, which would otherwise be 2^64 clients).

A row keeps an HMAC-SHA256 of its subject under a key derived from the deployment's secret (``derive_key``),
never the address or the email: a plain digest is undone by hashing every IPv4 address or a list of emails in
seconds. Rows older than the window are swept (``forget_older_than``). The table grows only by failures that
were allowed a password check, and the checks one process runs at once are bounded (``api/login_guard.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

ADDRESS = "address"
PAIR = "pair"


@dataclass(frozen=True)
class FailureLimits:
    """At most ``per_address`` failures from one client address within ``window_seconds`` (one more is refused
    until the oldest leaves the window); past ``per_pair`` from one address for one account, that pair waits
    ``delay``."""

    per_address: int = 20
    per_pair: int = 5
    window_seconds: float = 300.0
    first_delay_seconds: float = 5.0

    def delay(self, failures: int) -> float:
        """How long after its last failure a pair with ``failures`` in the window waits: none below
        ``per_pair``, then ``first_delay_seconds`` doubled at each further failure, at most the window."""
        if failures < self.per_pair:
            return 0.0
        doublings = min(failures - self.per_pair, 64)  # 2^64 seconds is past any window already
        return min(self.window_seconds, self.first_delay_seconds * 2.0 ** doublings)


def derive_key(secret: str | bytes) -> bytes:
    """The key of the rows' HMACs, from the deployment's secret: every replica derives the same one, and it is
    not the secret itself (a row's digest is no oracle for the tokens' signing key)."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(raw, b"login-failures", hashlib.sha256).digest()


def client(address: str) -> str:
    """The client as counted: an IPv4 address, an IPv6 one's /64 (IPv4-mapped: the IPv4), else the text."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def accounts(email: str, tenant_id: str | None) -> tuple[str, ...]:
    """What a login's failures count against: the account as asked (the tenant named, or none, and the email),
    whether or not it names an account, so that no count is shared between two ways of asking for one account
    and the answers say nothing about which emails exist in which tenant (and a refusal needs no lookup of
    them); ``forgiven_by`` says when a success may clear it."""
    return (account(tenant_id, email),)


def account(tenant_id: str | None, email: str) -> str:
    """One login as asked (``accounts``' key for it)."""
    return json.dumps(["login", tenant_id, email.strip().lower()])


def forgiven_by(candidates: Sequence[dict], asked: tuple[str, ...]) -> str | None:
    """The key a successful sign-in clears: only one that names a single account. An email asked without a
    tenant that two tenants hold would otherwise be cleared by signing in to the other tenant's twin, which the
    guesser may have made."""
    return asked[0] if len(candidates) == 1 and len(asked) == 1 else None


def _subject(key: bytes, *parts: str) -> bytes:
    # JSON of the parts: no two different lists of parts are the same text
    return hmac.new(key, json.dumps(parts).encode(), hashlib.sha256).digest()


def _address_subject(key: bytes, address: str) -> bytes:
    return _subject(key, ADDRESS, client(address))


def _pair_subject(key: bytes, address: str, account_: str) -> bytes:
    return _subject(key, PAIR, client(address), account_)


# The address's most recent `per_address` failures within the window: refused when there are that many, until the
# oldest of them leaves the window (the answer a sliding window of `per_address` entries gives).
_ADDRESS_RECENT = """
SELECT count(*) AS failures,
       EXTRACT(EPOCH FROM min(failed_at) + make_interval(secs => %(window)s) - clock_timestamp()) AS wait
FROM (SELECT failed_at FROM login_failures
      WHERE scope = 'address' AND subject = %(subject)s
        AND failed_at > clock_timestamp() - make_interval(secs => %(window)s)
      ORDER BY failed_at DESC LIMIT %(per_address)s) recent
"""

# Each pair's failures within the window and the seconds since its last (a pair's rows in the window are at most
# its address's, which stop being written at `per_address`).
_PAIRS_RECENT = """
SELECT count(*) AS failures, EXTRACT(EPOCH FROM clock_timestamp() - max(failed_at)) AS since_last
FROM login_failures
WHERE scope = 'pair' AND subject = ANY(%(subjects)s)
  AND failed_at > clock_timestamp() - make_interval(secs => %(window)s)
GROUP BY subject
"""


def retry_after(conn: psycopg.Connection, key: bytes, address: str, accounts_: Iterable[str],
                limits: FailureLimits) -> float | None:
    """Seconds until ``address`` may try ``accounts_`` again (the longest wait of the address and of each pair),
    or None when it may now."""
    window = limits.window_seconds
    waits = []
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_ADDRESS_RECENT, {"subject": _address_subject(key, address), "window": window,
                                            "per_address": limits.per_address}).fetchone()
        if row["failures"] >= limits.per_address:
            waits.append(float(row["wait"]))
        pairs = [_pair_subject(key, address, a) for a in accounts_]
        for row in cur.execute(_PAIRS_RECENT, {"subjects": pairs, "window": window}).fetchall():
            wait = limits.delay(row["failures"]) - float(row["since_last"])
            if wait > 0:
                waits.append(wait)
    return max(waits) if waits else None


def record(conn: psycopg.Connection, key: bytes, address: str, accounts_: Iterable[str], *,
           signed_in: str | None = None) -> None:
    """A failure counts against the address and each pair of it with ``accounts_``; a sign-in (``signed_in``:
    the account) clears that one pair's failures only (the address's stay: one address guessing many accounts
    is still throttled, and other addresses' guesses at the account are theirs)."""
    if signed_in is not None:
        conn.execute("DELETE FROM login_failures WHERE scope = 'pair' AND subject = %s",
                     (_pair_subject(key, address, signed_in),))
        return
    rows = [(ADDRESS, _address_subject(key, address))]
    rows += [(PAIR, _pair_subject(key, address, a)) for a in dict.fromkeys(accounts_)]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO login_failures (scope, subject) VALUES (%s, %s)", rows)


def forget_older_than(conn: psycopg.Connection, window_seconds: float) -> int:
    """Delete the failures that no longer count; returns how many went."""
    cur = conn.execute("DELETE FROM login_failures WHERE failed_at < clock_timestamp() - make_interval(secs => %s)",
                       (window_seconds,))
    return cur.rowcount
