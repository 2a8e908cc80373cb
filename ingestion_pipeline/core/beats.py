"""A beat on a thread: what keeps a lease alive while its holder works.

A run's claims (``core/leases.py``), a unit of a big document (``documents/units.py``) and a Redis consumer
(``queues/redis_consumer.py``) each say "still here" on a daemon thread every few seconds. A holder that dies
stops beating, its lease runs out and whoever watches hands the work back. A beat that fails (a database or
Redis restart) is logged and tried again at the next interval: a few lost beats do not cost the lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_log = logging.getLogger("ingestion_pipeline.beats")


class Beat:
    """Calls ``beat`` every ``every`` seconds from ``start()`` until ``stop()``, or until ``beat`` returns False
    (the lease is someone else's now: nothing left to keep). ``what`` names the lease in the warning logged when a
    beat fails."""

    def __init__(self, beat: Callable[[], bool | None], every: float, *, name: str, what: str) -> None:
        self._beat, self.every, self.what = beat, every, what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if self._beat() is False:
                    return
            except Exception as exc:  # keep beating: the next beat may get through
                _log.warning("%s: a beat failed (%s); the next one is in %.1f s", self.what, exc, self.every)

    def start(self) -> Beat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
