"""Staging a metric upload: stream the file, normalise and validate each row, COPY in bounded chunks.

Memory stays bounded by ``chunk_rows`` whatever the file size. A rerun resumes after the last staged
``row_index`` (rows already staged are parsed but not written again).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from psycopg.types.json import Jsonb

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.ledger import METRIC_UPLOADS
from ingestion_pipeline.metrics.exports import ExportReader
from ingestion_pipeline.metrics.normalization import normalize_row
from ingestion_pipeline.metrics.readers import MalformedFileError

_COPY = """COPY staging_rows (upload_id, row_index, line_number, entity_type, natural_key_hash, raw_data, normalized,
                              validation_status, validation_errors) FROM STDIN"""


@dataclass
class StagingCounts:
    total: int
    valid: int
    invalid: int
    resumed_after: int  # rows found already staged by an earlier attempt
    skipped: int = 0  # summary / total rows of the export: not data, not invalid
    layout: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def valid_ratio(self) -> float:
        return self.valid / self.total if self.total else 0.0


def _json_default(value):
    return str(value)


def stage_upload(db: Database, upload: dict, *, owner: str, chunk_rows: int = 10_000) -> StagingCounts:
    """Stage every row of the upload's file; raises MalformedFileError (with the line) on a broken file.

    Each chunk is written only while ``owner`` still holds the upload (``LeaseLost`` otherwise).
    """
    upload_id = upload["upload_id"]
    with db.connection() as conn:
        already = conn.execute(
            "SELECT coalesce(max(row_index), 0) AS n FROM staging_rows WHERE upload_id = %s", (upload_id,)
        ).fetchone()["n"]
    raw_path = Path(upload["raw_path"] or "")
    if not raw_path.is_file():
        raise MalformedFileError(None, f"the stored file is missing ({raw_path}); submit it again")
    pending: list[tuple] = []
    row_index = 0

    def flush() -> None:
        if not pending:
            return
        with db.transaction() as conn:
            ledger.hold(conn, METRIC_UPLOADS, upload_id, owner)
            with conn.cursor().copy(_COPY) as copy:
                for record in pending:
                    copy.write_row(record)
        pending.clear()
        failpoint("metrics.stage")  # one chunk committed, the rest not yet

    with raw_path.open("rb") as stream:
        export = ExportReader(stream, upload["file_format"], upload["platform"])
        for line_number, raw, plan in export.rows():
            row_index += 1
            if row_index <= already:
                continue
            row = normalize_row(raw, workspace_id=upload["workspace_id"], platform=upload["platform"], plan=plan)
            pending.append((
                upload_id, row_index, line_number, row.entity_type, row.natural_key_hash,
                Jsonb(raw if isinstance(raw, dict) else {"value": raw}, dumps=_dumps),
                Jsonb(row.values, dumps=_dumps), "valid" if row.valid else "invalid", Jsonb(row.errors, dumps=_dumps),
            ))
            if len(pending) >= chunk_rows:
                flush()
        flush()
    with db.connection() as conn:
        counts = conn.execute(
            """SELECT count(*) AS total, count(*) FILTER (WHERE validation_status <> 'invalid') AS valid
                 FROM staging_rows WHERE upload_id = %s""",
            (upload_id,),
        ).fetchone()
    return StagingCounts(counts["total"], counts["valid"], counts["total"] - counts["valid"], already,
                         export.summary_rows, export.layout.name if export.layout else None, export.notes)


def _finite(value):
    """jsonb has no Infinity or NaN: keep them as the strings the file held."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _dumps(value) -> str:
    # jsonb cannot hold NUL characters; exports occasionally carry them
    return json.dumps(_finite(value), default=_json_default, ensure_ascii=False).replace("\\u0000", "")
