"""Read-side queries over a tenant's documents (what the CLI and, later, the API list)."""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id


def list_documents(conn: psycopg.Connection, tenant_id: str, *, include_inactive: bool = False) -> list[dict]:
    validate_tenant_id(tenant_id)
    return conn.execute(
        """SELECT d.doc_id, d.source_uri, coalesce(v.title, d.title) AS title, v.filename, v.version_number,
                  v.version_id, v.content_hash, v.pipeline_fingerprint, v.page_count, v.chunk_count,
                  v.token_count, v.size_bytes, v.activated_at,
                  (SELECT count(*) FROM document_versions x WHERE x.doc_id = d.doc_id AND x.tenant_id = %(t)s)
                      AS versions
             FROM documents d
             LEFT JOIN document_versions v ON v.doc_id = d.doc_id AND v.tenant_id = %(t)s AND v.is_active
            WHERE d.tenant_id = %(t)s AND (%(all)s OR v.version_id IS NOT NULL)
            ORDER BY d.doc_id""",
        {"t": tenant_id, "all": include_inactive},
    ).fetchall()
