"""How often a Celery run's process looks for its finished steps: soon after something happened, seldom after.

dagster-celery's loop (``dagster_celery.core_execution_loop``) sends the steps that are ready, reads the result of
every step in flight (one result-backend read each), and sleeps a fixed tick. A fixed tick trades two costs: each
step of a run's chain waits half a tick on average before the next is sent (a small revision's run is a chain of
ten short steps: benchmarks/big_documents.py --celery-polls measures what the tick costs it), and each look reads
every step in flight (a big scan's hundreds of units at a short tick would be thousands of reads a second).

``Pace`` makes the tick follow the run: the pause before a look is a tenth of the time since a step was last
sent or ended, at least ``QUICK_SECONDS`` and at most ``INGESTION_CELERY_POLL_SECONDS``. So each step of a chain
of short steps is noticed within a tenth of its own duration, while a step that takes minutes costs a look every
``INGESTION_CELERY_POLL_SECONDS``. Whatever the pause, the looks read at most ``READS_PER_SECOND`` results a
second: with N steps in flight a pause is at least N / ``READS_PER_SECOND``.

The loop has no parameter for its sleep: ``dagster_internals.pace_celery_loop`` replaces the ``time`` its module
calls ``sleep`` on with a ``PacedClock`` (every other attribute is the real module's), and ``PacedCeleryExecutor``
(``runtime/executor.py``) tells the pace of each event the loop yields
(``dagster_internals.celery_step_sent_or_ended``). ``runtime/test_celery_pace.py`` holds the policy;
``faults/test_celery_workers.py`` runs real runs through it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

QUICK_SECONDS = 0.02  # the first look after a step was sent or ended
WAITED_SHARE = 0.1  # then a look every tenth of the time since
READS_PER_SECOND = 500  # result-backend reads the looks may make, every step in flight read once per look


class Pace:
    """The pause before the loop's next look, from what the loop's events said happened and when."""

    def __init__(self, longest: float, quick: float = QUICK_SECONDS, reads_per_second: int = READS_PER_SECOND,
                 clock=time.monotonic):
        self.longest = max(longest, quick)
        self.quick = quick
        self.reads_per_second = reads_per_second
        self._clock = clock
        self._lock = threading.Lock()  # two runs orchestrated by one process share the pace
        self._since = clock()  # the last step sent or ended
        self.in_flight = 0

    def sent(self) -> None:
        with self._lock:
            self.in_flight += 1
            self._since = self._clock()

    def ended(self) -> None:
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)
            self._since = self._clock()

    def next_pause(self) -> float:
        """A tenth of the time since the last step was sent or ended, between the quickest and the longest pause:
        a step is noticed within about a tenth of its own duration (after a 0.3 s step, 0.03 s; after a minute's,
        ``longest``); never more than ``reads_per_second`` results read a second."""
        with self._lock:
            waited = self._clock() - self._since
            pause = min(max(WAITED_SHARE * waited, self.quick), self.longest)
            return max(pause, self.in_flight / self.reads_per_second)


class PacedClock:
    """The ``time`` module, but ``sleep`` pauses as long as the pace says (the loop's fixed tick is ignored)."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace

    def sleep(self, _tick: float) -> None:
        time.sleep(self.pace.next_pause())

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
