"""Failed logins, counted in Postgres so that every API process and host sees the same counts.

Throttling that each process kept for itself gave a client as many guesses as there are API replicas behind
the load balancer; in the database, the tenth wrong password for an account is the tenth wherever it was
sent. The time is the database's (``clock_timestamp()``), so hosts whose clocks differ still agree.

A row holds a SHA-256 of the client address or of the lower-cased email, never either one: the table stays
small whatever a client sends and says nothing about who tried. Rows older than the window are swept
(``forget_older_than``). The table grows only by failures that were allowed a password check, and the
checks one process runs at once are bounded (``api/login_guard.py``): a flood adds at most that rate times
the window, and the limits below stop recording a key once it is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

ADDRESS = "address"
ACCOUNT = "account"


@dataclass(frozen=True)
class FailureLimits:
    """At most ``per_address`` failures from one client address and ``per_account`` for one email within
    ``window_seconds``; one more is refused until the oldest of them leaves the window."""

    per_address: int = 20
    per_account: int = 10
    window_seconds: float = 300.0


def subject(value: str) -> bytes:
    """What a row keeps of an address or an email: its SHA-256 (emails compared case-insensitively)."""
    return hashlib.sha256(value.strip().lower().encode("utf-8", errors="surrogatepass")).digest()


# For each scope, the most recent `limit` failures within the window: refused when there are `limit` of them,
# until the oldest of those leaves the window (the same answer a sliding window of `limit` entries gives).
_RECENT = """
SELECT scope, count(*) AS failures,
       EXTRACT(EPOCH FROM min(failed_at) + make_interval(secs => %(window)s) - clock_timestamp()) AS wait
FROM (
    (SELECT scope, failed_at FROM login_failures
     WHERE scope = 'address' AND subject = %(address)s
       AND failed_at > clock_timestamp() - make_interval(secs => %(window)s)
     ORDER BY failed_at DESC LIMIT %(per_address)s)
    UNION ALL
    (SELECT scope, failed_at FROM login_failures
     WHERE scope = 'account' AND subject = %(account)s
       AND failed_at > clock_timestamp() - make_interval(secs => %(window)s)
     ORDER BY failed_at DESC LIMIT %(per_account)s)
) recent
GROUP BY scope
"""


def retry_after(conn: psycopg.Connection, address: str, account: str, limits: FailureLimits) -> float | None:
    """Seconds until this address and account may try again, or None when neither has reached its limit."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_RECENT, {"address": subject(address), "account": subject(account),
                                     "window": limits.window_seconds, "per_address": limits.per_address,
                                     "per_account": limits.per_account}).fetchall()
    limit = {ADDRESS: limits.per_address, ACCOUNT: limits.per_account}
    waits = [float(row["wait"]) for row in rows if row["failures"] >= limit[row["scope"]]]
    return max(waits) if waits else None


def record(conn: psycopg.Connection, address: str, account: str, *, succeeded: bool) -> None:
    """A failure counts against the address and the account; a success clears the account's failures (the
    address's stay: one address guessing many accounts is still throttled)."""
    if succeeded:
        conn.execute("DELETE FROM login_failures WHERE scope = 'account' AND subject = %s", (subject(account),))
        return
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO login_failures (scope, subject) VALUES (%s, %s)",
                        [(ADDRESS, subject(address)), (ACCOUNT, subject(account))])


def forget_older_than(conn: psycopg.Connection, window_seconds: float) -> int:
    """Delete the failures that no longer count; returns how many went."""
    cur = conn.execute("DELETE FROM login_failures WHERE failed_at < clock_timestamp() - make_interval(secs => %s)",
                       (window_seconds,))
    return cur.rowcount
