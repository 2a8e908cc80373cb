"""Re-indexing: active versions made by another pipeline (fingerprint) chunked and embedded again from the
elements stored with them, as ordinary ledger rows (``run_type = 'reindex'``) that go through the same
batches, runs and steps as uploads.

A version is *stale* when its fingerprint differs from the current one. It can be re-indexed from its
stored elements when doing so gives another fingerprint (the chunker or the model changed). When the
extractor changed, or the version was promoted before elements were kept, the elements must be made
again from the raw file, which is not kept after promotion: a version from an S3 source whose object is
still the one it was made from is fetched again (``from: s3``); any other is reported as needing the
file, never queued to come out the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION

REINDEX = "reindex"

# extractor version of the stored elements (None: none stored) -> the fingerprint a re-index would give
FingerprintFor = Callable[[str | None], str | None]


@dataclass(frozen=True)
class StaleVersion:
    version_id: int
    tenant_id: str
    doc_id: int
    version_number: int
    filename: str | None
    fingerprint: str
    reason: str | None = None  # why it cannot be re-indexed here (None: it can)
    from_s3: bool = False  # extracted again from its S3 object (the stored elements will not do)


@dataclass
class ReindexPlan:
    """What a re-index over some active versions finds (and, once queued, what it queued)."""

    current_fingerprint: str
    active: int = 0  # active versions looked at
    current: int = 0  # already at the current fingerprint (and not forced)
    reindexable: list[StaleVersion] = field(default_factory=list)
    needs_file: list[StaleVersion] = field(default_factory=list)
    queued_file_ids: list[int] = field(default_factory=list)
    already_queued: list[int] = field(default_factory=list)  # versions with a re-index queued or running already

    @property
    def stale(self) -> int:
        return len(self.reindexable) + len(self.needs_file)

    def summary(self) -> str:
        parts = [f"{self.active} active version(s)", f"{self.current} current"]
        if self.reindexable:
            parts.append(f"{len(self.reindexable)} to re-index")
        if self.needs_file:
            parts.append(f"{len(self.needs_file)} need their file again")
        if self.queued_file_ids or self.already_queued:
            parts.append(f"{len(self.queued_file_ids)} queued now, {len(self.already_queued)} already queued")
        return ", ".join(parts)


def find_versions(conn: psycopg.Connection, fingerprint_for: FingerprintFor, *, tenant_id: str | None = None,
                  doc_ids: list[int] | None = None, stale_only: bool = True) -> ReindexPlan:
    """Sort the active versions (of a tenant, of some documents, or all) into current, re-indexable and
    needing the file. ``stale_only=False`` re-indexes current versions too (when they have elements)."""
    current_fp = fingerprint_for(EXTRACTOR_VERSION)
    assert current_fp is not None
    plan = ReindexPlan(current_fp)
    params = {"tenant": tenant_id, "docs": doc_ids, "current": current_fp, "stale_only": stale_only}
    # Counted apart, and only the stale versions read: every batch's `fingerprints_current` check asks, and
    # reading every active version (with its elements' and S3 object's state) grew with the deployment
    # (every batch paid for every active version; a million would take seconds).
    plan.active = conn.execute(
        """SELECT count(*) AS n FROM document_versions v
            WHERE v.is_active AND (%(tenant)s::text IS NULL OR v.tenant_id = %(tenant)s)
              AND (%(docs)s::bigint[] IS NULL OR v.doc_id = ANY(%(docs)s))""", params).fetchone()["n"]
    rows = conn.execute(
        """SELECT v.version_id, v.tenant_id, v.doc_id, v.version_number, v.filename, v.pipeline_fingerprint,
                  v.extractor_version,
                  EXISTS (SELECT 1 FROM version_elements e WHERE e.version_id = v.version_id) AS has_elements,
                  (o.status = 'active' AND o.etag = r.source_etag) AS object_unchanged
             FROM document_versions v
             LEFT JOIN ingestion_runs r ON r.file_id = v.file_id
             LEFT JOIN source_objects o ON o.source_id = r.source_id AND o.key = r.source_key
            WHERE v.is_active AND (%(tenant)s::text IS NULL OR v.tenant_id = %(tenant)s)
              AND (%(docs)s::bigint[] IS NULL OR v.doc_id = ANY(%(docs)s))
              AND (NOT %(stale_only)s OR v.pipeline_fingerprint <> %(current)s)
            ORDER BY v.tenant_id, v.version_id""",
        params,
    ).fetchall()
    if stale_only:  # a version promoted between the two statements is counted as current
        plan.current = max(0, plan.active - len(rows))
    for r in rows:
        stale = r["pipeline_fingerprint"] != current_fp
        target = fingerprint_for(r["extractor_version"]) if r["has_elements"] else None
        version = StaleVersion(r["version_id"], r["tenant_id"], r["doc_id"], r["version_number"], r["filename"],
                               r["pipeline_fingerprint"])
        # elements of an older extractor (or none): extract again if the S3 object is still the same
        if (target is None or r["extractor_version"] != EXTRACTOR_VERSION) and r["object_unchanged"]:
            plan.reindexable.append(_with(version, from_s3=True))
        elif target is None:
            plan.needs_file.append(_with(version, reason="promoted before extracted elements were kept; "
                                                         "submit the file again to re-index it"))
        elif target == r["pipeline_fingerprint"] and stale:
            plan.needs_file.append(_with(
                version, reason=f"extracted by {r['extractor_version']} (now {EXTRACTOR_VERSION}) and the raw file "
                                "is not kept; submit the file again to extract it anew"))
        else:
            plan.reindexable.append(version)
    return plan


def _with(version: StaleVersion, **changes) -> StaleVersion:
    return dataclasses.replace(version, **changes)


def queue(conn: psycopg.Connection, plan: ReindexPlan, *, force: bool = False,
          partition_key: str | None = None) -> ReindexPlan:
    """One queued ledger row per re-indexable version (none if one is queued or running already).

    ``partition_key``: put the rows into that batch (a person re-materialised it) instead of leaving
    them to the planner. ``force``: re-index even if the version turns out current when its turn comes.
    """
    for version in plan.reindexable:
        # from its S3 object: fetched (If-Match the ETag it was made from) and extracted like a new file
        extra = {"reindex_of_version": version.version_number, "force": force,
                 "from": "s3" if version.from_s3 else "elements"}
        row = conn.execute(
            """INSERT INTO ingestion_runs
                   (tenant_id, doc_id, run_type, status, source_uri, content_hash, size_bytes, config, source_id,
                    source_key, source_etag, partition_key, reindex_of_version_id)
               SELECT v.tenant_id, v.doc_id, %(type)s, 'queued', coalesce(r.source_uri, 'version:' || v.version_id),
                      v.content_hash, v.size_bytes,
                      jsonb_build_object('filename', v.filename, 'title', v.title, 'content_type', v.content_type,
                                         'extension', r.config -> 'extension',
                                         'extractor_version', CASE WHEN %(from_s3)s THEN NULL
                                                                   ELSE v.extractor_version END)
                      || %(extra)s,
                      r.source_id, r.source_key, r.source_etag, %(partition)s, v.version_id
                 FROM document_versions v LEFT JOIN ingestion_runs r ON r.file_id = v.file_id
                WHERE v.version_id = %(version)s
               ON CONFLICT (reindex_of_version_id) WHERE status IN ('queued', 'running') DO NOTHING
               RETURNING file_id""",
            {"type": REINDEX, "version": version.version_id, "partition": partition_key, "from_s3": version.from_s3,
             "extra": Jsonb(extra)},
        ).fetchone()
        if row is None:
            plan.already_queued.append(version.version_id)
        else:
            plan.queued_file_ids.append(row["file_id"])
    return plan


def queue_stale_in_partition(conn: psycopg.Connection, partition_key: str,
                             fingerprint_for: FingerprintFor) -> ReindexPlan:
    """A person re-materialised (or backfilled) a batch: the stale active versions of its documents are
    re-indexed in the same batch."""
    docs = [r["doc_id"] for r in conn.execute(
        "SELECT DISTINCT doc_id FROM ingestion_runs WHERE partition_key = %s AND status = 'succeeded'",
        (partition_key,),
    ).fetchall()]
    plan = find_versions(conn, fingerprint_for, doc_ids=docs)
    if docs and plan.reindexable:
        queue(conn, plan, partition_key=partition_key)
    return plan


def active_fingerprints(conn: psycopg.Connection) -> list[str]:
    """The distinct fingerprints of the active versions: it changes when a new pipeline's versions appear
    and when the last version of an old one is re-indexed (what the fingerprint sensor watches)."""
    return [r["pipeline_fingerprint"] for r in conn.execute(
        "SELECT DISTINCT pipeline_fingerprint FROM document_versions WHERE is_active ORDER BY 1").fetchall()]


def stale_counts(conn: psycopg.Connection, fingerprint_for: FingerprintFor) -> dict[str, int]:
    """For the `fingerprints_current` check: how many active versions are stale, per tenant too."""
    plan = find_versions(conn, fingerprint_for)
    by_tenant: dict[str, int] = {}
    for v in plan.reindexable + plan.needs_file:
        by_tenant[v.tenant_id] = by_tenant.get(v.tenant_id, 0) + 1
    return {"active": plan.active, "stale": plan.stale, "reindexable": len(plan.reindexable),
            "needs_file": len(plan.needs_file), **{f"stale_in_{t}": n for t, n in sorted(by_tenant.items())}}
