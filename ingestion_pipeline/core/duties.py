"""A long-lived service's duties: each one bounded round, repeated at its own interval on its own thread.

Why threads, one per duty: a round of one duty may wait (an SQS long poll, an S3 listing page, a database
that restarts) and must not hold back another (a Redis job is taken within a second whatever S3 does).
Each round's outcome is one line of the service's log; a round that did nothing says nothing. A round that
fails is logged (once per distinct error, then once a minute while it lasts) and tried again at the next
interval: a Postgres restart or a Redis outage pauses a duty, it never ends the service. ``stop()`` (SIGTERM,
Ctrl-C) ends every loop after the rounds in progress.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

REPEAT_ERROR_AFTER_SECONDS = 60.0


@dataclass(frozen=True)
class Duty:
    """One kind of work: ``round()`` does a bounded amount of it and returns what to log (None: nothing done)."""

    name: str
    interval_seconds: float
    round: Callable[[], str | None]


@dataclass
class RoundResult:
    duty: str
    message: str | None
    error: str | None = None


class Duties:
    """Runs duties once each (``run_once``) or until stopped (``run_until_stopped``), logging through ``log``."""

    def __init__(self, duties: list[Duty], log: Callable[[str], None]) -> None:
        if not duties:
            raise ValueError("a service needs at least one duty")
        self.duties, self.log = duties, log
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run_round(self, duty: Duty) -> RoundResult:
        try:
            message = duty.round()
        except Exception as exc:  # noqa: BLE001 - a duty's failure is logged and retried, never the service's end
            return RoundResult(duty.name, None, f"{type(exc).__name__}: {exc}")
        return RoundResult(duty.name, message)

    def run_once(self) -> list[RoundResult]:
        """Every duty's round once, in order (``intake --once``, tests); each outcome logged."""
        results = [self.run_round(duty) for duty in self.duties]
        for result in results:
            if result.error:
                self.log(f"{result.duty}: round failed: {result.error}")
            elif result.message:
                self.log(f"{result.duty}: {result.message}")
        return results

    def run_until_stopped(self) -> None:
        threads = [threading.Thread(target=self._loop, args=(duty,), name=f"duty-{duty.name}", daemon=True)
                   for duty in self.duties]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    thread.join(timeout=0.5)
        finally:
            self._stop.set()

    def _loop(self, duty: Duty) -> None:
        last_error, last_error_logged = None, 0.0
        while not self._stop.is_set():
            started = time.monotonic()
            result = self.run_round(duty)
            if result.error:
                if result.error != last_error or started - last_error_logged >= REPEAT_ERROR_AFTER_SECONDS:
                    self.log(f"{duty.name}: round failed: {result.error} (tried again every "
                             f"{duty.interval_seconds:g} s)")
                    last_error_logged = started
                last_error = result.error
            else:
                if last_error is not None:
                    self.log(f"{duty.name}: working again")
                last_error = None
                if result.message:
                    self.log(f"{duty.name}: {result.message}")
            self._stop.wait(max(0.0, duty.interval_seconds - (time.monotonic() - started)))
