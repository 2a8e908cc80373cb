"""Which tenant a Redis job's ``rag_id`` belongs to, and the folder its files must lie under (``rag_sources``).

Kept in the database so every consumer on every host reads one answer. An unknown ``rag_id`` is refused
(``ERR_UNKNOWN_RAG``), never made into a tenant; a ``source_path`` whose real path (symlinks resolved) is
not under the root is refused (``ERR_PATH_REFUSED``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id

RAG_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_]{0,63}"  # no '-': the job id is split on it (sql/024 checks it too)
_RAG_ID = re.compile(RAG_ID_PATTERN)


def validate_rag_id(rag_id: str) -> str:
    if not isinstance(rag_id, str) or not _RAG_ID.fullmatch(rag_id):
        raise ValueError(f"invalid rag_id {rag_id!r}: 1-64 of letters, digits and '_', starting with a letter "
                         "or digit (no '-': job ids are split on it)")
    return rag_id


@dataclass(frozen=True)
class RagSource:
    rag_id: str
    tenant_id: str
    root: Path

    def as_dict(self) -> dict:
        return {"rag_id": self.rag_id, "tenant_id": self.tenant_id, "root": str(self.root)}


class PathRefused(ValueError):
    """The job's file is not under its rag's root."""


def add_rag(conn: psycopg.Connection, rag_id: str, *, tenant_id: str, root: str | Path) -> RagSource:
    """Register (or re-point) a rag: its tenant and root (an existing folder; stored as its real path)."""
    validate_rag_id(rag_id)
    validate_tenant_id(tenant_id)
    real = Path(os.path.realpath(root))
    if not real.is_dir():
        raise ValueError(f"root {root} is not a folder")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('rag_sources'))")  # overlap checks in turn
        # a root inside (or around) another tenant's would let either tenant's jobs take the other's files, as
        # S3 locations of two tenants may not overlap either
        for other in list_rags(conn):
            if other.tenant_id != tenant_id and other.rag_id != rag_id and (
                    real.is_relative_to(other.root) or other.root.is_relative_to(real)):
                raise ValueError(f"root {real} overlaps rag {other.rag_id}'s root {other.root}, another tenant's: "
                                 "tenants' rags have disjoint folders")
        ensure_tenant(conn, tenant_id)
        conn.execute(
            """INSERT INTO rag_sources (rag_id, tenant_id, root) VALUES (%s, %s, %s)
               ON CONFLICT (rag_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, root = EXCLUDED.root""",
            (rag_id, tenant_id, str(real)),
        )
    return RagSource(rag_id, tenant_id, real)


def list_rags(conn: psycopg.Connection) -> list[RagSource]:
    rows = conn.execute("SELECT rag_id, tenant_id, root FROM rag_sources ORDER BY rag_id").fetchall()
    return [RagSource(r["rag_id"], r["tenant_id"], Path(r["root"])) for r in rows]


def get_rag(conn: psycopg.Connection, rag_id: str) -> RagSource | None:
    row = conn.execute("SELECT rag_id, tenant_id, root FROM rag_sources WHERE rag_id = %s", (rag_id,)).fetchone()
    return RagSource(row["rag_id"], row["tenant_id"], Path(row["root"])) if row else None


def remove_rag(conn: psycopg.Connection, rag_id: str) -> None:
    """Jobs already accepted keep their tenant; later jobs of this rag are refused."""
    if conn.execute("DELETE FROM rag_sources WHERE rag_id = %s RETURNING rag_id", (rag_id,)).fetchone() is None:
        raise ValueError(f"no rag {rag_id!r}")


def resolve_under_root(rag: RagSource, source_path: str) -> Path:
    """The real path of ``source_path`` (symlinks resolved) if it lies under the rag's root."""
    real = Path(os.path.realpath(source_path))
    if not real.is_relative_to(rag.root):
        shown = f"{source_path} (really {real})" if str(real) != source_path else source_path
        raise PathRefused(f"{shown} is not under rag {rag.rag_id}'s root {rag.root}")
    return real
