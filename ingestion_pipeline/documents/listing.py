"""Read-side queries over a tenant's documents (what the CLI and the API list). Every one takes the tenant."""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id

# active: an active version; inactive: versions, none active; versioned: any version; all: also never promoted.
DOCUMENT_FILTERS = ("active", "inactive", "versioned", "all")

_WHERE = """d.tenant_id = %(t)s
       AND CASE %(status)s
             WHEN 'active' THEN v.version_id IS NOT NULL
             WHEN 'inactive' THEN v.version_id IS NULL
                                  AND EXISTS (SELECT 1 FROM document_versions x WHERE x.doc_id = d.doc_id)
             WHEN 'versioned' THEN EXISTS (SELECT 1 FROM document_versions x WHERE x.doc_id = d.doc_id)
             ELSE true END
       AND (%(search)s::text IS NULL
            OR coalesce(v.title, d.title, '') ILIKE %(pattern)s OR coalesce(v.filename, '') ILIKE %(pattern)s
            OR d.source_uri ILIKE %(pattern)s)"""
_FROM = """FROM documents d
      LEFT JOIN document_versions v ON v.doc_id = d.doc_id AND v.tenant_id = %(t)s AND v.is_active"""


def _params(tenant_id: str, status: str, search: str | None) -> dict:
    validate_tenant_id(tenant_id)
    if status not in DOCUMENT_FILTERS:
        raise ValueError(f"unknown document filter {status!r}; expected one of {', '.join(DOCUMENT_FILTERS)}")
    escaped = None if not search else search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return {"t": tenant_id, "status": status, "search": search or None,
            "pattern": f"%{escaped}%" if escaped else None}


def list_documents(
    conn: psycopg.Connection, tenant_id: str, *, status: str = "active", search: str | None = None,
    limit: int | None = None, offset: int = 0,
) -> list[dict]:
    """A tenant's documents with their active version (if any), oldest first."""
    params = {**_params(tenant_id, status, search), "limit": limit, "offset": offset}
    return conn.execute(
        f"""SELECT d.doc_id, d.source_uri, coalesce(v.title, d.title) AS title, v.filename, v.version_number,
                   v.version_id, v.content_hash, v.pipeline_fingerprint, v.page_count, v.chunk_count,
                   v.token_count, v.size_bytes, v.activated_at, (v.version_id IS NOT NULL) AS is_active,
                   (SELECT count(*) FROM document_versions x WHERE x.doc_id = d.doc_id AND x.tenant_id = %(t)s)
                       AS versions
              {_FROM}
             WHERE {_WHERE}
             ORDER BY d.doc_id LIMIT %(limit)s OFFSET %(offset)s""",
        params,
    ).fetchall()


def count_documents(conn: psycopg.Connection, tenant_id: str, *, status: str = "active",
                    search: str | None = None) -> int:
    return conn.execute(f"SELECT count(*) AS n {_FROM} WHERE {_WHERE}",
                        _params(tenant_id, status, search)).fetchone()["n"]


def get_document(conn: psycopg.Connection, tenant_id: str, doc_id: int) -> dict | None:
    """One document of the tenant with all its versions, newest first (None: not this tenant's)."""
    validate_tenant_id(tenant_id)
    doc = conn.execute(
        """SELECT doc_id, tenant_id, source_uri, title, created_at, updated_at FROM documents
            WHERE tenant_id = %s AND doc_id = %s""",
        (tenant_id, doc_id),
    ).fetchone()
    if doc is None:
        return None
    doc["versions"] = conn.execute(
        """SELECT version_id, version_number, content_hash, pipeline_fingerprint, is_active, title, filename,
                  content_type, size_bytes, page_count, chunk_count, token_count, file_id, activated_at,
                  deactivated_at
             FROM document_versions WHERE tenant_id = %s AND doc_id = %s ORDER BY version_number DESC""",
        (tenant_id, doc_id),
    ).fetchall()
    doc["is_active"] = any(v["is_active"] for v in doc["versions"])
    return doc
