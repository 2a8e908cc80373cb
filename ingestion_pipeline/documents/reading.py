"""A version as a person reads it: its chunks in order (the web app's inspector), one chunk's place on its pages.
Every query takes the tenant: another tenant's document or chunk is not found, exactly like a missing one."""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT


def version_to_read(conn: psycopg.Connection, tenant_id: str, doc_id: int,
                    version_number: int | None = None) -> dict | None:
    """The document's version ``version_number``, or its active one (else its latest) when None."""
    validate_tenant_id(tenant_id)
    return conn.execute(
        """SELECT v.version_id, v.doc_id, v.version_number, v.is_active, v.content_hash, v.title, v.filename,
                  v.content_type, v.page_count, v.chunk_count, v.token_count, v.created_at, d.source_uri
             FROM document_versions v JOIN documents d ON d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
            WHERE v.tenant_id = %(t)s AND v.doc_id = %(d)s
              AND (%(n)s::int IS NULL OR v.version_number = %(n)s)
            ORDER BY v.is_active DESC, v.version_number DESC LIMIT 1""",
        {"t": tenant_id, "d": doc_id, "n": version_number}).fetchone()


def version_chunks(conn: psycopg.Connection, tenant_id: str, version_id: int) -> list[dict]:
    """The version's chunks in reading order, with what the inspector shows of each."""
    validate_tenant_id(tenant_id)
    return conn.execute(
        """SELECT chunk_id, ordinal, text, page_start, page_end, section_path, token_count,
                  text_search_config AS language, %(ocr)s = ANY (element_types) AS ocr
             FROM chunks WHERE tenant_id = %(t)s AND version_id = %(v)s ORDER BY ordinal""",
        {"t": tenant_id, "v": version_id, "ocr": OCR_TEXT}).fetchall()


def ocr_pages(conn: psycopg.Connection, tenant_id: str, version_id: int) -> list[int]:
    """The version's pages read by OCR."""
    validate_tenant_id(tenant_id)
    rows = conn.execute("SELECT page_number FROM version_ocr_pages WHERE tenant_id = %s AND version_id = %s"
                        " ORDER BY page_number", (tenant_id, version_id)).fetchall()
    return [row["page_number"] for row in rows]


def chunk_to_locate(conn: psycopg.Connection, tenant_id: str, chunk_id: int) -> dict | None:
    """The chunk with its version's file digest and pages (to find it on its pages), or None."""
    validate_tenant_id(tenant_id)
    return conn.execute(
        """SELECT c.chunk_id, c.doc_id, c.ordinal, c.text, c.page_start, c.page_end, v.version_number,
                  v.content_hash, v.page_count, v.chunk_count
             FROM chunks c JOIN document_versions v ON v.version_id = c.version_id AND v.tenant_id = c.tenant_id
            WHERE c.tenant_id = %s AND c.chunk_id = %s""", (tenant_id, chunk_id)).fetchone()
