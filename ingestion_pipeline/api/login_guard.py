"""What keeps a flood of logins from taking the service down: bcrypt is slow on purpose (~0.3 s a check at
cost 12), so an unauthenticated client that sends wrong passwords as fast as it can would hold every core and,
if the hash ran while a database connection was held, every connection of the pool.

- **The hash holds no connection**: the route reads the account (a query), gives the connection back, then
  hashes (``users.login_candidates`` / ``users.match_password``).
- **A bounded number of hashes at once** (``INGESTION_API_MAX_CONCURRENT_LOGINS``, default 2): the others wait
  their turn; more than ``4 ×`` that waiting, and the next gets 429 with
  ``Retry-After`` rather than a place in a queue that only grows.
- **Throttling by failures**: ``INGESTION_API_LOGIN_FAILURES_PER_ADDRESS`` (default 20) failed logins from one
  client address, or ``INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT`` (default 10) for one email (whether or not it
  exists, so the answer tells nothing about which do), within ``INGESTION_API_LOGIN_WINDOW_SECONDS`` (300):
  the next attempt gets 429 ``too_many_logins`` with ``Retry-After`` (when the oldest failure leaves the
  window), and costs no hash. A success clears the account's failures.

Counts are per server process (each uvicorn worker keeps its own), which bounds each process's work, and at
most 50,000 addresses and accounts are remembered (the least recent half is forgotten beyond); the
address is the connection's peer (behind a proxy, the proxy's: configure uvicorn's ``--proxy-headers`` and
``--forwarded-allow-ips`` so it is the client's).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_KEYS = 50_000  # addresses (or accounts) with recent failures kept; beyond, the least recent half goes


class LoginRefused(Exception):
    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.retry_after = max(1, retry_after)


@dataclass
class _Failures:
    """Failure times per key in a sliding window (bounded: at most ``limit`` kept per key)."""

    limit: int
    window: float
    times: dict[str, deque] = field(default_factory=dict)

    def retry_after(self, key: str, now: float) -> float | None:
        kept = self._trim(key, now)
        if kept is not None and len(kept) >= self.limit:
            return kept[0] + self.window - now
        return None

    def add(self, key: str, now: float) -> None:
        kept = self._trim(key, now)
        if kept is None:
            if len(self.times) >= MAX_KEYS:  # a flood from many addresses or of many emails stays bounded
                self.sweep(now)
                for stale in sorted(self.times, key=lambda k: self.times[k][-1])[:len(self.times) // 2 or 1]:
                    del self.times[stale]
            kept = self.times[key] = deque(maxlen=self.limit)
        kept.append(now)

    def clear(self, key: str) -> None:
        self.times.pop(key, None)

    def _trim(self, key: str, now: float) -> deque | None:
        kept = self.times.get(key)
        if kept is None:
            return None
        while kept and kept[0] <= now - self.window:
            kept.popleft()
        if not kept:
            del self.times[key]
            return None
        return kept

    def sweep(self, now: float) -> None:
        for key in list(self.times):
            self._trim(key, now)


class LoginGuard:
    def __init__(self, *, concurrent: int = 2, per_address: int = 20, per_account: int = 10,
                 window_seconds: float = 300.0, clock=time.monotonic) -> None:
        self.concurrent = concurrent
        self.max_waiting = 4 * concurrent
        self._slots = threading.BoundedSemaphore(concurrent)
        self._waiting = 0
        self._lock = threading.Lock()
        self._clock = clock
        self._addresses = _Failures(per_address, window_seconds)
        self._accounts = _Failures(per_account, window_seconds)
        self._swept = clock()

    def check(self, address: str, account: str) -> None:
        """``LoginRefused`` if this address or account has failed too often lately."""
        now = self._clock()
        with self._lock:
            if now - self._swept > 60:  # keys of clients that stopped trying go, so memory stays bounded
                self._addresses.sweep(now)
                self._accounts.sweep(now)
                self._swept = now
            waits = [w for w in (self._addresses.retry_after(address, now),
                                 self._accounts.retry_after(account.strip().lower(), now)) if w is not None]
        if waits:
            raise LoginRefused("too many failed logins: try again later", math.ceil(max(waits)))

    def record(self, address: str, account: str, succeeded: bool) -> None:
        now = self._clock()
        account = account.strip().lower()
        with self._lock:
            if succeeded:
                self._accounts.clear(account)
            else:
                self._addresses.add(address, now)
                self._accounts.add(account, now)

    @contextlib.contextmanager
    def hashing(self) -> Iterator[None]:
        """One password check (on a worker thread): at most ``concurrent`` at once; ``LoginRefused`` when
        ``max_waiting`` already wait, so a flood holds at most that many threads."""
        with self._lock:
            if self._waiting >= self.max_waiting:
                raise LoginRefused("too many logins at once: try again shortly", 1)
            self._waiting += 1
        try:
            self._slots.acquire()
        finally:
            with self._lock:
                self._waiting -= 1
        try:
            yield
        finally:
            self._slots.release()
