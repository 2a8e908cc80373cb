"""Bounds on streaming uploads, so one client (or one tenant) cannot starve the others.

``UploadSlots``: at most ``limit`` uploads stream at once (beyond: 503 ``busy``); one tenant holds at most half
of them and one user at most half of its tenant's share (beyond: 429 ``too_many_uploads``), so a tenant that
fills its share leaves the rest to others. The body is paced (``body_bounds.paced_body``): a stalled or
trickling upload ends with 408 ``upload_too_slow`` and the connection closed (its slot is free again at once).

The API runs one event loop per process, so plain counters are enough (no lock).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import Request

from ingestion_pipeline.api.body_bounds import paced_body
from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.api.multipart import ParsedForm, parse_upload
from ingestion_pipeline.core.access_tokens import Principal
from ingestion_pipeline.core.settings import ApiSettings

RETRY_AFTER_SECONDS = "2"
# What the upload routes document for these bounds (OpenAPI ``responses``).
UPLOAD_BOUNDS_RESPONSES = {
    408: {"description": "the upload stalled or arrived under the minimum rate (INGESTION_API_UPLOAD_*)"},
    429: {"description": "the tenant or the user already streams its share of the upload slots (Retry-After)"},
    503: {"description": "every upload slot is taken (Retry-After)"},
}


class UploadSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tenant_share = max(1, limit // 2)
        self.user_share = max(1, self.tenant_share // 2)
        self.active = 0
        self._tenants: Counter[str] = Counter()
        self._users: Counter[str] = Counter()

    @contextmanager
    def hold(self, who: Principal) -> Iterator[None]:
        """One slot for ``who``'s upload while it streams; refused (503 or 429, with Retry-After) when full."""
        retry = {"Retry-After": RETRY_AFTER_SECONDS}
        if self.active >= self.limit:
            raise ApiError(503, "busy", f"{self.limit} uploads are already streaming; retry shortly", retry)
        if self._tenants[who.tenant_id] >= self.tenant_share:
            raise ApiError(429, "too_many_uploads", f"tenant {who.tenant_id} already streams {self.tenant_share} "
                           f"uploads, its share of the server's {self.limit}; retry when one has finished", retry)
        if self._users[who.user_id] >= self.user_share:
            raise ApiError(429, "too_many_uploads", f"you already stream {self.user_share} uploads, a user's share; "
                           "retry when one has finished", retry)
        self.active += 1
        self._tenants[who.tenant_id] += 1
        self._users[who.user_id] += 1
        try:
            yield
        finally:
            self.active -= 1
            for counts, key in ((self._tenants, who.tenant_id), (self._users, who.user_id)):
                counts[key] -= 1
                if not counts[key]:  # only callers streaming now are kept: the counters stay bounded
                    del counts[key]


async def receive_upload(request: Request, who: Principal, api: ApiSettings, **parse: Any) -> ParsedForm:
    """A multipart upload received within the bounds: a slot held while it streams, the body paced."""
    with request.app.state.upload_slots.hold(who):
        body = paced_body(request.stream(), idle_seconds=api.upload_idle_seconds,
                          min_bytes_per_second=api.upload_min_bytes_per_second)
        return await parse_upload(request.headers, body, **parse)
