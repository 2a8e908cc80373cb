"""The work a flood brings, run at the lowest CPU priority: the searches of a tenant at its share
(``read_slots.py``) and password hashes (``login_guard.py``).

- **Threads** (``LoweredThreads``): on Linux a thread has a nice value of its own (``setpriority`` on its thread
  id). A thread is lowered once, when it starts, and never raised back (raising needs a privilege), so lowered
  work runs on threads of its own. Nice 19 (CFS weight 15 against a normal thread's 1,024) rather than 10 (110):
  on 2 cores another tenant's search p95 during a search flood stayed closer to its idle one at 19 than at 10
  (``benchmarks/tenant_fairness.py`` measures it, the flood's client in the server's session). ``SCHED_IDLE``
  measured the same and was not taken: a thread that runs only on an idle core may hold the interpreter's lock
  while both cores are busy, stalling every other request of the process.
- **A process of its own** (``LoweredProcess``) for the CPU-heavy part (a query's embedding, a bcrypt check).
  Where the kernel schedules by session (autogroup: a server started from a shell, outside any cgroup of its
  own), a nice value weighs only against the threads of its own session, and the sessions share the cores
  evenly; PostgreSQL makes each backend a session of its own, so a lowered thread of the API still weighed as much
  as another tenant's backend. A child in a session of its own, whose group is lowered too
  (``/proc/self/autogroup``), weighs 15 against the backends' 1,024 (another tenant's p95 came closer to its idle
  one during a login flood, less clearly during a search flood: benchmarks/tenant_fairness.py measures both).
  Inside a container's or a service's cgroup the kernel does not group by session, and the child is a lowered
  process like the threads. It starts on first use, off the request; until it has answered once (the model
  loaded), or after it died, the work runs on the lowered thread; it ends with the server (the pool's shutdown,
  or, when the server was killed, by watching for its parent to go).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TypeVar

LOWER_PRIORITY_NICE = 19
PARENT_CHECK_SECONDS = 1.0
T = TypeVar("T")
_log = logging.getLogger(__name__)


def lower_this_threads_priority() -> None:
    """Give the calling thread nice ``LOWER_PRIORITY_NICE`` (Linux; elsewhere it keeps its priority)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWER_PRIORITY_NICE)
    except (AttributeError, OSError) as exc:  # another OS: the shares and bounds alone hold the flood
        _log.info("lowered threads keep their priority: %s", exc)


def lower_this_process() -> None:
    """In a lowered child: a session of its own, that session's scheduling group and the process at
    ``LOWER_PRIORITY_NICE``; it ends when its parent does. Each step is skipped where the OS lacks it."""
    parent = os.getppid()
    threading.Thread(target=_end_with, args=(parent,), name="end-with-parent", daemon=True).start()
    try:
        os.setsid()
        Path("/proc/self/autogroup").write_text(str(LOWER_PRIORITY_NICE))
    except OSError:  # no autogroup scheduling (or already a session leader): the nice value is the whole story
        pass
    lower_this_threads_priority()


def _end_with(parent: int) -> None:
    """A pool's child outlives a SIGKILLed server (it waits on a queue nobody writes), and the kernel's
    parent-death signal follows the thread that started the child (a request's, which may end first), not the
    process: so the child watches for its parent to change."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


class LoweredThreads:
    """A pool of ``size`` lowered threads, started on first use."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix=self.name,
                                                initializer=lower_this_threads_priority)
            return self._pool


class LoweredProcess:
    """``size`` lowered child processes (spawned, so no lock or connection of the server is inherited), started
    by the first ``call`` and ready once each has run ``warm`` (a picklable callable: load what the work needs)."""

    def __init__(self, size: int, name: str, warm: Callable[[], object]) -> None:
        self.size, self.name, self.warm = size, name, warm
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    def call(self, work: Callable[..., T], *args, here: Callable[[], T]) -> T:
        """``work(*args)`` in a lowered child once they are ready, else ``here()`` on the calling thread (while
        they start, or when one died: the pool is then started again on the next call)."""
        future = self._submit(work, *args)
        if future is None:
            return here()
        try:
            return future.result()
        except BrokenProcessPool:
            _log.warning("a lowered %s process ended; it is started again", self.name)
            self._lost()
            return here()

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool, self._ready = self._pool, None, False
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, work: Callable[..., T], *args) -> Future | None:
        with self._lock:
            if self._pool is None:
                self._start()
                return None
            if not self._ready:
                return None
            try:
                return self._pool.submit(work, *args)
            except BrokenProcessPool:
                pass
        self._lost()
        return None

    def _start(self) -> None:
        pool = ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=lower_this_process)
        self._pool = pool
        warmed = [pool.submit(self.warm) for _ in range(self.size)]

        def one_done(_: Future) -> None:
            if not all(f.done() for f in warmed):
                return
            failed = next((f.exception() for f in warmed if f.exception() is not None), None)
            with self._lock:
                if self._pool is not pool:
                    return
                if failed is None:
                    self._ready = True
                    return
            _log.warning("the lowered %s process did not start (%s); the work stays on lowered threads",
                         self.name, failed)

        for future in warmed:
            future.add_done_callback(one_done)

    def _lost(self) -> None:
        with self._lock:
            pool, self._pool, self._ready = self._pool, None, False
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
