"""Search narrowed to part of a tenant's knowledge base: some documents, a source, file types, languages, a date range.

A filtered search stays exact: the chunks the filter admits are found first (``admitted_chunks``, through the
tenant's served versions, never a scan of its chunks), and both arms then rank only those. The vector arm ranks
every admitted chunk exactly (no graph: a graph walk filtered afterwards could stop before the filtered set's best),
the text arm seeds its candidates from the admitted chunks' words only (``text_ranking``), so no better hit of the
filtered set is ever left out for another's sake. A filter admitting more than ``MAX_ADMITTED_CHUNKS`` chunks is
refused with why, rather than ranked slowly: an exact ranking's cost is the chunks it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id

# what an exact ranking reads at most (its cost: benchmarks/search_latency.py, the exact path)
MAX_ADMITTED_CHUNKS = 20_000


class FilterTooBroad(ValueError):
    """The filter admits more chunks than a filtered search ranks exactly."""


@dataclass(frozen=True)
class SearchFilter:
    """What a search is narrowed to; every field left empty admits everything on its account."""

    doc_ids: tuple[int, ...] = ()
    source: str | None = None  # a prefix of the documents' source URI (s3://bucket/folder/, upload://)
    file_types: tuple[str, ...] = ()  # file name extensions, without the dot: pdf, docx
    languages: tuple[str, ...] = ()  # the chunks' text-search configurations: english, french, simple
    since: datetime | None = None  # the version served from this moment on, or later
    until: datetime | None = None  # ... before this one

    def __bool__(self) -> bool:
        return bool(self.doc_ids or self.source or self.file_types or self.languages or self.since or self.until)

    def describe(self) -> str:
        parts = [f"documents {', '.join(map(str, self.doc_ids))}" if self.doc_ids else "",
                 f"source {self.source}*" if self.source else "",
                 f"type {', '.join(self.file_types)}" if self.file_types else "",
                 f"language {', '.join(self.languages)}" if self.languages else "",
                 f"from {self.since.isoformat()}" if self.since else "",
                 f"before {self.until.isoformat()}" if self.until else ""]
        return "; ".join(p for p in parts if p)


def search_filter(*, doc_ids=(), source: str | None = None, file_types=(), languages=(),
                  since: datetime | None = None, until: datetime | None = None) -> SearchFilter:
    """A filter from what a person typed: types without their dot and lower-cased, empty values dropped, a moment
    without a time zone taken as UTC."""
    since, until = (_aware(moment) for moment in (since, until))
    if since is not None and until is not None and since >= until:
        raise ValueError("the date range is empty: 'since' must come before 'until'")
    return SearchFilter(tuple(dict.fromkeys(int(d) for d in doc_ids)), (source or "").strip() or None,
                        tuple(dict.fromkeys(t.strip().lstrip(".").lower() for t in file_types if t.strip())),
                        tuple(dict.fromkeys(language.strip().lower() for language in languages if language.strip())),
                        since, until)


def _aware(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


# From the tenant's served versions (its active ones, a partial unique index), then their chunks by version.
_ADMITTED_SQL = r"""
SELECT c.chunk_id
  FROM document_versions v
  JOIN documents d ON d.doc_id = v.doc_id AND d.tenant_id = %(tenant)s
  JOIN chunks c ON c.version_id = v.version_id AND c.tenant_id = %(tenant)s
 WHERE v.tenant_id = %(tenant)s AND v.is_active
   AND (%(docs)s::bigint[] IS NULL OR v.doc_id = ANY(%(docs)s))
   AND (%(source)s::text IS NULL OR d.source_uri LIKE %(source)s)
   AND (%(types)s::text[] IS NULL OR lower(substring(coalesce(v.filename, d.source_uri) from '\.([^./]+)$'))
                                      = ANY(%(types)s))
   AND (%(languages)s::text[] IS NULL OR c.text_search_config = ANY(%(languages)s))
   AND (%(since)s::timestamptz IS NULL OR coalesce(v.activated_at, v.created_at) >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR coalesce(v.activated_at, v.created_at) < %(until)s)
 LIMIT %(limit)s
"""


def admitted_chunks(conn: psycopg.Connection, tenant_id: str, only: SearchFilter) -> list[int]:
    """The tenant's served chunks the filter admits; ``FilterTooBroad`` past ``MAX_ADMITTED_CHUNKS``."""
    validate_tenant_id(tenant_id)
    source = None
    if only.source:
        source = only.source.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = conn.execute(_ADMITTED_SQL, {
        "tenant": tenant_id, "docs": list(only.doc_ids) or None, "source": source,
        "types": list(only.file_types) or None, "languages": list(only.languages) or None, "since": only.since,
        "until": only.until, "limit": MAX_ADMITTED_CHUNKS + 1}).fetchall()
    if len(rows) > MAX_ADMITTED_CHUNKS:
        raise FilterTooBroad(f"the filter ({only.describe()}) admits more than {MAX_ADMITTED_CHUNKS:,} chunks: a "
                             "filtered search ranks every one exactly; narrow it (documents, a source, a type, dates)")
    return [r["chunk_id"] for r in rows]
