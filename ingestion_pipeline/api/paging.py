"""``page`` / ``limit`` on every list (limit at most 200), and the page envelope with ``total``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query

from ingestion_pipeline.core.db import Database

MAX_LIMIT = 200


@dataclass(frozen=True)
class Paging:
    page: int
    limit: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.limit

    def envelope(self, items: list, total: int) -> dict:
        return {"items": items, "total": total, "page": self.page, "limit": self.limit}

    def of(self, db: Database, list_rows: Callable[..., list], count_rows: Callable[..., int], **filters: Any) -> dict:
        """This page of ``list_rows(conn, limit=, offset=, **filters)`` with ``count_rows(conn, **filters)``."""
        with db.connection() as conn:
            rows = list_rows(conn, limit=self.limit, offset=self.offset, **filters)
            total = count_rows(conn, **filters)
        return self.envelope(rows, total)


def _paging(page: Annotated[int, Query(ge=1, le=100_000)] = 1,
            limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50) -> Paging:
    return Paging(page, limit)


PageParams = Annotated[Paging, Depends(_paging)]
