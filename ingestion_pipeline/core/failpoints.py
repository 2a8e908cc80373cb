"""Named points where a fault-injection test can stop a real worker process (no-ops otherwise).

With ``INGESTION_FAILPOINT=<name>`` and ``INGESTION_FAILPOINT_DIR=<folder>``, the first process to
reach ``failpoint(<name>)`` writes ``<folder>/<pid>.<name>`` and sleeps, so the test can SIGKILL it
at exactly that point (inside the promotion transaction, between two committed embedding units …);
processes that come after the marker exists run through. Without the variables nothing happens.

A failpoint arms only inside a test (pytest's ``PYTEST_CURRENT_TEST`` is set) or with an explicit
``INGESTION_ALLOW_FAILPOINTS=1`` beside it (the fault tests' worker processes set it): a stray
``INGESTION_FAILPOINT`` in a production environment is reported once and never stalls a worker.

Points: ``model.load``, ``extract.file``, ``extract.unit_done`` (a unit of a big PDF kept, the others not yet),
``chunk.part_done`` (a part of a big document's chunks kept, the step not yet reported), ``embed.unit``,
``promote.transaction``, ``promote.statement`` (a statement in flight inside the promotion transaction:
``failpoint_statement``), ``index.batch`` (a batch of promoted vectors put into their HNSW graph, not
committed), ``metrics.stage``, ``metrics.promote``, ``queue.taken`` (a Redis job taken, nothing
committed), ``queue.accepted`` (its ledger row committed, the message not yet acknowledged).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

_log = logging.getLogger(__name__)
_reached: set[str] = set()
# Check and mark under one lock: two file lanes (threads) could both pass the check and both stop, the second's
# pg_sleep beginning after the first's was cancelled, and the process under test then waited the whole sleep.
_reached_lock = threading.Lock()


def armed() -> bool:
    """Whether a set ``INGESTION_FAILPOINT`` may stop this process."""
    return os.environ.get("INGESTION_ALLOW_FAILPOINTS") == "1" or "PYTEST_CURRENT_TEST" in os.environ


def _reached_first(name: str) -> bool:
    """Whether ``name`` is the armed failpoint, reached here first (then its marker is written)."""
    if os.environ.get("INGESTION_FAILPOINT") != name:
        return False
    with _reached_lock:  # two file lanes at the same point: one stops, the other runs through
        if name in _reached:
            return False
        _reached.add(name)
    if not armed():
        _log.warning("INGESTION_FAILPOINT=%s is set but ignored: failpoints arm only in tests or with "
                     "INGESTION_ALLOW_FAILPOINTS=1", name)
        return False
    folder = os.environ.get("INGESTION_FAILPOINT_DIR")
    if folder:
        if any(Path(folder).glob(f"*.{name}")):
            return False  # once across processes: a retry that comes after the kill runs through
        Path(folder, f"{os.getpid()}.{name}").touch()
    return True


def _sleep_seconds() -> float:
    return float(os.environ.get("INGESTION_FAILPOINT_SLEEP", "120"))


def failpoint(name: str) -> None:
    if _reached_first(name):
        time.sleep(_sleep_seconds())


def failpoint_statement(name: str, conn) -> None:
    """``failpoint(name)`` whose wait is a statement in flight on ``conn`` (``pg_sleep``): the process is
    stopped while the database works for it, as in a long statement."""
    if _reached_first(name):
        conn.execute("SELECT pg_sleep(%s)", (_sleep_seconds(),))
