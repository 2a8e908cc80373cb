"""Fair shares for expensive reads (search), as ``upload_slots`` gives them to uploads.

A search embeds the query and runs two ranked queries; 300 long searches from one user took every worker
thread and pooled connection, and another tenant's searches waited behind them (benchmarks/tenant_fairness.py).
So each tenant runs at most ``INGESTION_API_SEARCHES_PER_TENANT`` (default: half the cores) searches at
once; its further searches wait their turn (holding a worker thread, so the wait is bounded too). Beyond
``4 ×`` that many waiting, the next gets 429 ``too_many_searches`` with ``Retry-After``, after a second's
pause spent on the event loop, not a thread: a client that ignores Retry-After cannot turn refusals into a
flood of their own (on 2 cores, answering 429s at once took as much from the other tenants as the searches
did). A tenant's load then delays its own searches, not the others'. Counts are per server process.

A search of a tenant that is at its share, or was within the last ``LOWERED_FOR_SECONDS``, runs on a thread of
the lowest CPU priority (``nice`` 19, Linux; ``lowered_work.py``): a tenant that sends one search at a time
never waits and keeps the normal priority, while a flood's searches take the cores only as far as the other
tenants' searches leave them free. Without the memory, each time a flood's queue drained (its refused clients
pausing) its next search found the share free and ran at the normal priority. The query's embedding, its
heaviest part, runs in a lowered process of its own (``ApiServices.query_vector``). Nothing needs a privilege:
those threads are lowered once and never raised back.

The refusal is made by ``RefuseOverShare``, a plain ASGI middleware, before FastAPI routes the request: a
flood's refused searches arrive every second from each of its connections, and through the whole stack
(routing, dependencies on worker threads, exception handlers) they held the event loop the other tenants'
requests wait on (``benchmarks/tenant_fairness.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.api.lowered_work import LoweredThreads
from ingestion_pipeline.api.web_session import COOKIE
from ingestion_pipeline.core.access_tokens import InvalidToken, verify_token

RETRY_AFTER_SECONDS = "1"
REFUSAL_PAUSE_SECONDS = 1.0
WAITING_FACTOR = 4
LOWER_PRIORITY_THREADS = 16
LOWERED_FOR_SECONDS = 5.0  # how long a tenant found at its share keeps its searches lowered


class TenantReadSlots:
    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self.max_waiting = WAITING_FACTOR * per_tenant
        self._lock = threading.Lock()
        self._slots: dict[str, threading.Semaphore] = {}
        self._queued: dict[str, int] = {}  # running or waiting, per tenant
        self._at_share: dict[str, float] = {}  # tenant -> when a read of it last found its share taken
        self._lower = LoweredThreads(LOWER_PRIORITY_THREADS, "search-lower")

    def busy(self, tenant_id: str) -> bool:
        """Whether a new read of ``tenant_id`` runs lowered: it would wait for its share (the tenant runs
        ``per_tenant`` already), or one did within the last ``LOWERED_FOR_SECONDS``."""
        now = time.monotonic()
        with self._lock:
            if self._queued.get(tenant_id, 0) >= self.per_tenant:
                self._at_share[tenant_id] = now
                return True
            since = self._at_share.get(tenant_id)
            if since is None:
                return False
            if now - since < LOWERED_FOR_SECONDS:
                return True
            del self._at_share[tenant_id]  # its load has passed: what is left of the tenant goes
            return False

    @property
    def lower_priority(self) -> ThreadPoolExecutor:
        """The threads a read that waited for its share runs on (started on first use)."""
        return self._lower.pool

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


class RefuseOverShare:
    """ASGI middleware: ``GET path`` of a tenant whose share is running and whose queue is full is answered 429
    ``too_many_searches`` (with ``Retry-After``) after ``REFUSAL_PAUSE_SECONDS`` on the event loop, without
    routing it. The tenant is the bearer token's when its signature holds (or ``?tenant_id=`` with auth off);
    a request without one goes on to the route, which answers it as every route does (401)."""

    def __init__(self, app, *, slots: TenantReadSlots, secret: str | None, auth_enabled: bool, session_key: str,
                 path: str = "/v1/search") -> None:
        self.app, self.slots, self.secret, self.auth_enabled, self.path = app, slots, secret, auth_enabled, path
        self.session_key = session_key  # the web app's session cookie (api/web_session.py)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == self.path and scope["method"] == "GET":
            tenant = self._tenant(scope)
            if tenant is not None and self.slots.full(tenant):
                await asyncio.sleep(REFUSAL_PAUSE_SECONDS)
                refusal = self.slots.refusal(tenant)
                body = json.dumps({"error": {"code": refusal.code, "message": refusal.message}}).encode()
                await send({"type": "http.response.start", "status": refusal.status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"retry-after", RETRY_AFTER_SECONDS.encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def _tenant(self, scope) -> str | None:
        session = _session_cookie(scope)
        if session is not None and not any(name == b"authorization" for name, _ in scope.get("headers", ())):
            try:
                return verify_token(session, self.session_key).tenant_id
            except InvalidToken:
                return None
        if not self.auth_enabled:
            values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("tenant_id")
            return values[0] if values else None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer" or not self.secret:
                    return None
                try:
                    return verify_token(token.strip(), self.secret).tenant_id
                except InvalidToken:
                    return None
        return None


def _session_cookie(scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            jar = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:
                return None
            if COOKIE in jar:
                return jar[COOKIE].value or None
    return None
