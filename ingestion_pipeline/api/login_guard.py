"""What keeps a flood of logins from taking the service down: bcrypt is slow on purpose (cost 12), so an
unauthenticated client that sends wrong passwords as fast as it can would hold every core and, if the hash ran
while a database connection was held, every connection of the pool (benchmarks/tenant_fairness.py floods it).

- **The hash holds no connection**: the route reads the account (a query), gives the connection back, then
  hashes (``users.login_candidates`` / ``users.match_password``).
- **A bounded number of hashes at once** (``INGESTION_API_MAX_CONCURRENT_LOGINS``, default 2): the others wait
  their turn; more than ``4 ×`` that waiting, and the next gets 429 with
  ``Retry-After`` rather than a place in a queue that only grows.
- **Hashes at the lowest CPU priority** (``lowered_work.py``): a login costs its hash on purpose; in lowered
  processes (``concurrent`` of them, started by the first login; until then on lowered threads) a flood's hashes
  take the cores only as far as the tenants' searches leave them free. A user's login is slower only while
  the cores are busy.
- **Throttling by failures** (``core/login_failures.py``), that slows a guesser without locking the owner out:
  ``INGESTION_API_LOGIN_FAILURES_PER_ADDRESS`` (default 20) failed logins from one client address within
  ``INGESTION_API_LOGIN_WINDOW_SECONDS`` (300), whatever the accounts, and its next attempt gets 429
  ``too_many_logins`` with ``Retry-After`` (when the oldest failure leaves the window). Past
  ``INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT`` (default 5) failures from one address for one account (a tenant's
  user; an unknown email counts as an account, so the answers tell nothing about which exist), each further
  attempt of that pair waits a delay that doubles with each failure (5 s, 10 s, ... at most the window): 429 with
  ``Retry-After`` until it has passed. A refusal costs no hash. Failures from other addresses never refuse an
  account, so its owner signs in from their own address whoever guesses elsewhere; a success clears only its
  own (address, account) pair.

Failures are counted in Postgres, so every API process and host sees the same counts: a flood spread over
several replicas gets no more guesses than one. The bound on hashes at once is each process's own (it protects
that process's cores). The address is the connection's peer; X-Forwarded-For is believed only from the proxies
named in ``INGESTION_API_TRUSTED_PROXIES`` (``api/server.py``), so a client cannot claim addresses of its own.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import psycopg

from ingestion_pipeline.api.lowered_work import LoweredProcess, LoweredThreads
from ingestion_pipeline.core import login_failures
from ingestion_pipeline.core.login_failures import FailureLimits

SWEEP_EVERY_SECONDS = 60.0  # how often a process deletes failures that left the window
T = TypeVar("T")


class LoginRefused(Exception):
    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.retry_after = max(1, retry_after)


class LoginGuard:
    def __init__(self, *, concurrent: int = 2, per_address: int = 20, per_pair: int = 5,
                 window_seconds: float = 300.0, key: bytes | None = None) -> None:
        self.concurrent = concurrent
        self.max_waiting = 4 * concurrent
        self.limits = FailureLimits(per_address, per_pair, window_seconds)
        # the rows' HMAC key (login_failures.derive_key of the deployment's secret, the same on every replica);
        # without one (no secret: no logins are served), a key of this process's own
        self.key = key if key is not None else secrets.token_bytes(32)
        self._slots = threading.BoundedSemaphore(concurrent)
        # checks one client address may have hashing or waiting at once: a slot always left for the others, so
        # one address signing in (successfully) in a loop cannot hold every check and refuse everyone else
        self.per_address_in_flight = max(1, concurrent - 1)
        self._in_flight: Counter[str] = Counter()
        self._waiting = 0
        self._lock = threading.Lock()
        self._swept = 0.0
        self._hashers = LoweredThreads(concurrent, "login-hash")
        # bcrypt is CPU: more hashing processes than cores hash no faster, and each holds a Python interpreter's
        # memory (docs/benchmarks.md). Sized by the limit alone, a limit raised far (the benchmark's "off":
        # 100,000) spawned processes until the kernel's OOM killer took the server; the checks beyond the cores
        # wait in the pool's queue.
        self._hash_processes = LoweredProcess(min(concurrent, os.cpu_count() or 1), "login-hash", warm=_hash_ready)

    def check(self, conn: psycopg.Connection, address: str, accounts: Iterable[str]) -> None:
        """``LoginRefused`` if this address, or this address for any of ``accounts``, has failed too often
        lately (on any API process)."""
        wait = login_failures.retry_after(conn, self.key, address, accounts, self.limits)
        if wait is not None:
            raise LoginRefused("too many failed logins: try again later", math.ceil(wait))

    def record(self, conn: psycopg.Connection, address: str, accounts: Iterable[str], *,
               succeeded: bool = False, forgive: str | None = None) -> None:
        """A failure of ``address`` for ``accounts``, or a success, which clears ``forgive``'s count (if any)."""
        if succeeded:
            if forgive is not None:
                login_failures.record(conn, self.key, address, accounts, signed_in=forgive)
            return
        login_failures.record(conn, self.key, address, accounts)
        now = time.monotonic()
        with self._lock:
            due = now - self._swept >= SWEEP_EVERY_SECONDS
            if due:
                self._swept = now
        if due:  # failures that no longer count go, so the table stays as small as the window
            login_failures.forget_older_than(conn, self.limits.window_seconds)

    @contextlib.contextmanager
    def hashing(self, address: str = "") -> Iterator[None]:
        """One password check (on a worker thread): at most ``concurrent`` at once, at most
        ``per_address_in_flight`` of them (hashing or waiting) from one client ``address``; ``LoginRefused`` when
        ``max_waiting`` already wait, so a flood holds at most that many threads."""
        client = login_failures.client(address)
        with self._lock:
            if self._in_flight[client] >= self.per_address_in_flight:
                raise LoginRefused("too many logins at once from this address: try again shortly", 1)
            if self._waiting >= self.max_waiting:
                raise LoginRefused("too many logins at once: try again shortly", 1)
            self._waiting += 1
            self._in_flight[client] += 1
        try:
            try:
                self._slots.acquire()
            finally:
                with self._lock:
                    self._waiting -= 1
            try:
                yield
            finally:
                self._slots.release()
        finally:
            with self._lock:
                self._in_flight[client] -= 1
                if not self._in_flight[client]:
                    del self._in_flight[client]

    def hash(self, check: Callable[..., T], *args, address: str = "") -> T:
        """Run the password ``check`` (picklable, as its arguments) in the bound of ``hashing``, in a lowered
        process once they run, else on a lowered thread; waited for here."""
        with self.hashing(address):
            return self._hash_processes.call(check, *args,
                                             here=lambda: self._hashers.pool.submit(check, *args).result())

    def close(self) -> None:
        """End the lowered hashing processes, if they were started (the app's shutdown)."""
        self._hash_processes.shutdown()


def _hash_ready() -> None:
    """A hashing process's warm-up: bcrypt imported."""
    import bcrypt  # noqa: F401
