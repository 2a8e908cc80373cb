"""Fair shares for expensive reads (search), as ``upload_slots`` gives them to uploads.

A search embeds the query and runs two ranked queries; 300 long searches from one user took every worker
thread and pooled connection, and another tenant's searches waited behind them (p50 from 25 ms to 1.7 s).
So each tenant runs at most ``INGESTION_API_SEARCHES_PER_TENANT`` (default: half the cores) searches at
once; its further searches wait their turn (holding a worker thread, so the wait is bounded too). Beyond
``4 ×`` that many waiting, the next gets 429 ``too_many_searches`` with ``Retry-After``, after a second's
pause spent on the event loop, not a thread: a client that ignores Retry-After cannot turn refusals into a
flood of their own (on 2 cores, answering 429s at once took as much from the other tenants as the searches
did). A tenant's load then delays its own searches, not the others'. Counts are per server process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ingestion_pipeline.api.errors import ApiError

RETRY_AFTER_SECONDS = "1"
WAITING_FACTOR = 4


class TenantReadSlots:
    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self.max_waiting = WAITING_FACTOR * per_tenant
        self._lock = threading.Lock()
        self._slots: dict[str, threading.Semaphore] = {}
        self._queued: dict[str, int] = {}  # running or waiting, per tenant

    def full(self, tenant_id: str) -> bool:
        """Whether ``tenant_id`` already runs its share and has ``max_waiting`` more waiting."""
        with self._lock:
            return self._queued.get(tenant_id, 0) >= self.per_tenant + self.max_waiting

    @staticmethod
    def refusal(tenant_id: str) -> ApiError:
        return ApiError(429, "too_many_searches", f"tenant {tenant_id} already runs and queues its share of "
                        "searches; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS})

    @contextmanager
    def hold(self, tenant_id: str) -> Iterator[None]:
        """Run one read of ``tenant_id`` in its share (called on a worker thread)."""
        with self._lock:
            queued = self._queued.get(tenant_id, 0)
            if queued >= self.per_tenant + self.max_waiting:
                raise self.refusal(tenant_id)
            self._queued[tenant_id] = queued + 1
            slot = self._slots.setdefault(tenant_id, threading.Semaphore(self.per_tenant))
        try:
            with slot:
                yield
        finally:
            with self._lock:
                self._queued[tenant_id] -= 1
                if not self._queued[tenant_id]:  # an idle tenant keeps no state
                    del self._queued[tenant_id]
                    del self._slots[tenant_id]
