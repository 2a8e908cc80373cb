"""How long raw bytes stay in the upload store once nothing will process them again.

- A file that failed, was dead-lettered or canceled keeps its bytes ``INGESTION_FAILED_TTL_DAYS`` (7)
  after it finished, for inspection and replay (`retry`); then they are removed and the ledger row
  says so (``raw_removed_at`` in its stats). A replay after that asks for the file again (uploads) or
  fetches the object again (S3).
- A metric export whose upload completed keeps its file as long (its rows are promoted and its
  staging rows are kept 7 days).
- A stored file no ledger row refers to (a submit that crashed between storing and recording, a
  half-written ``.incoming-*``, an S3 store's ``.incoming/`` object or unfinished multipart upload) is removed
  after ``INGESTION_ORPHAN_TTL_HOURS`` (24).

Bytes that queued or in-flight work still needs are never removed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS, LedgerTable, table_sql
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.core.upload_store import UploadStore, stored_in


@dataclass
class RetentionReport:
    expired_files: int = 0
    orphan_files: int = 0
    bytes_freed: int = 0

    def describe(self) -> str:
        return (f"removed {self.expired_files} expired and {self.orphan_files} orphaned stored file(s), "
                f"{self.bytes_freed:,} bytes")


def _release(location: str, stores: Sequence[UploadStore], report: RetentionReport) -> bool:
    """Remove a stored file through the store it lives in (a path no store owns: a local file)."""
    store = next((s for s in stores if s.owns(location)), None) or stored_in(location)
    freed = store.release(location)
    report.bytes_freed += freed
    return freed > 0


def _expired(db: Database, t: LedgerTable, ttl_days: float) -> list[dict]:
    done = [*t.replayable, *(t.succeeded if t is METRIC_UPLOADS else ())]
    with db.connection() as conn:
        return conn.execute(
            table_sql("""SELECT w.{key} AS id, w.raw_path FROM {table} w
                   WHERE w.status = ANY(%(done)s) AND w.raw_path IS NOT NULL
                     AND w.finished_at < now() - make_interval(secs => %(ttl)s)
                     AND NOT EXISTS (SELECT 1 FROM {table} o WHERE o.raw_path = w.raw_path
                                        AND o.status = ANY(%(unfinished)s))""", t),
            {"done": done, "ttl": ttl_days * 86400, "unfinished": list(t.unfinished)},
        ).fetchall()


def remove_expired_raw_files(db: Database, policy: ReliabilitySettings,
                             stores: Sequence[UploadStore] = ()) -> RetentionReport:
    report = RetentionReport()
    for t in (DOCUMENT_FILES, METRIC_UPLOADS):
        for row in _expired(db, t, policy.failed_ttl_days):
            if _release(row["raw_path"], stores, report):
                report.expired_files += 1
            with db.transaction() as conn:
                conn.execute(table_sql("UPDATE {table} SET raw_path = NULL, stats = stats || %s WHERE {key} = %s", t),
                             (Jsonb({"raw_removed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}),
                              row["id"]))
    return report


def remove_orphans(db: Database, stores: Sequence[UploadStore], policy: ReliabilitySettings,
                   report: RetentionReport | None = None) -> RetentionReport:
    """Stored files (objects) older than the orphan TTL that no ledger row refers to."""
    report = report or RetentionReport()
    for store in stores:
        candidates = store.stale(policy.orphan_ttl_hours * 3600)
        for start in range(0, len(candidates), 1000):
            chunk = candidates[start:start + 1000]
            with db.connection() as conn:
                referenced = {r["raw_path"] for r in conn.execute(
                    """SELECT raw_path FROM ingestion_runs WHERE raw_path = ANY(%(paths)s)
                       UNION SELECT raw_path FROM data_uploads WHERE raw_path = ANY(%(paths)s)""",
                    {"paths": chunk}).fetchall()}
            for location in chunk:
                if location not in referenced and _release(location, [store], report):
                    report.orphan_files += 1
    return report
