"""Promotion: staged chunks become the one active version of a document, in one transaction.

Inside the transaction: a per-document advisory lock, the file's one-time finalize claim, the new
``document_versions`` row, chunks, embeddings and tsvectors copied from staging, the previous active version
deactivated, the ledger row marked succeeded and the staging rows dropped. Readers see the old version or the
new one, never a mix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import CodedError
from ingestion_pipeline.core.ledger import LeaseLost
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.staging import discard


class PromotionError(CodedError):
    """The staged work cannot become a version (the message says why)."""

    def __init__(self, message: str, *, code: str = "promotion_failed") -> None:
        super().__init__(code, message)


class Superseded(PromotionError):
    """A re-index whose version is no longer active: a newer version (or a deletion) came first."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="superseded")


def superseded_reason(conn: psycopg.Connection, doc_id: int, version_number: int) -> str:
    active = conn.execute("SELECT version_number FROM document_versions WHERE doc_id = %s AND is_active",
                          (doc_id,)).fetchone()
    if active is None:
        return f"version {version_number} is no longer active (the document was deactivated)"
    return f"superseded: version {active['version_number']} is active"


@dataclass(frozen=True)
class PromotedVersion:
    version_id: int
    version_number: int
    chunk_count: int
    token_count: int
    replaced_version_id: int | None


def promote_document_version(
    conn: psycopg.Connection, row: dict, *, owner: str, fingerprint: str, model: str, model_digest: str,
    extractor_version: str, timings_ms: dict[str, int],
) -> PromotedVersion:
    """Promote the staged chunks of ledger row ``row``, held by ``owner``. The caller commits (or rolls back).

    The staged elements are kept with the version (``version_elements``, made by ``extractor_version``):
    re-indexing starts from them. A re-index (``row["reindex_of_version_id"]``) whose version is no
    longer active raises ``Superseded``. ``timings_ms`` (the earlier steps) is completed with this
    step's duration on the ledger row.
    """
    started = time.perf_counter()
    tenant_id, doc_id, file_id = row["tenant_id"], row["doc_id"], row["file_id"]
    file_ledger.hold(conn, file_id, owner)  # first: a run that lost this file promotes nothing
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"doc:{doc_id}",))
    # the single winner: a second promoter of these staged rows (two workers finishing the file together, a
    # step delivered twice) gets no row and promotes nothing. The claim commits or rolls back with the promotion.
    claimed = conn.execute(
        """UPDATE staging_documents SET finalize_claimed_at = now()
            WHERE file_id = %s AND finalize_claimed_at IS NULL RETURNING file_id""", (file_id,)).fetchone()
    if claimed is None:
        raise LeaseLost(f"file {file_id}'s version is already promoted by another worker")
    if row.get("reindex_of_version_id") is not None:  # under the lock: no newer version can slip in after this
        reindexed = conn.execute("SELECT version_number, is_active FROM document_versions WHERE version_id = %s",
                                 (row["reindex_of_version_id"],)).fetchone()
        if not reindexed["is_active"]:
            raise Superseded(superseded_reason(conn, doc_id, reindexed["version_number"]))
    totals = conn.execute(
        """SELECT count(*) AS chunks, coalesce(sum(token_count), 0) AS tokens,
                  count(*) FILTER (WHERE embedding IS NULL) AS unembedded
             FROM staging_chunks WHERE file_id = %s""",
        (file_id,),
    ).fetchone()
    if totals["chunks"] == 0:
        raise PromotionError("no chunks were produced; nothing to promote", code="no_chunks")
    if totals["unembedded"]:
        raise PromotionError(f"{totals['unembedded']} chunk(s) have no embedding", code="embeddings_missing")
    page_count = conn.execute(
        "SELECT page_count FROM staging_documents WHERE file_id = %s", (file_id,)
    ).fetchone()["page_count"]

    if row.get("source_id") is not None:
        listed = conn.execute(
            "SELECT status, etag FROM source_objects WHERE source_id = %s AND key = %s FOR UPDATE",
            (row["source_id"], row["source_key"]),
        ).fetchone()
        if listed is not None and listed["status"] == "deleted":
            raise PromotionError("the object was deleted from the bucket while this version was processed",
                                 code="s3_object_deleted")
    previous = conn.execute(
        """UPDATE document_versions SET is_active = false, deactivated_at = now()
            WHERE tenant_id = %s AND doc_id = %s AND is_active RETURNING version_id""",
        (tenant_id, doc_id),
    ).fetchone()
    config = row["config"] or {}
    version = conn.execute(
        """INSERT INTO document_versions
               (tenant_id, doc_id, version_number, content_hash, pipeline_fingerprint, is_active, title,
                filename, content_type, size_bytes, page_count, chunk_count, token_count, file_id,
                activated_at, extractor_version, embedding_model)
           VALUES (%s, %s,
                   (SELECT coalesce(max(version_number), 0) + 1 FROM document_versions WHERE doc_id = %s),
                   %s, %s, true, %s, %s, %s, %s, %s, %s, %s, %s, now(), %s, %s)
           RETURNING version_id, version_number""",
        (tenant_id, doc_id, doc_id, row["content_hash"], fingerprint, config.get("title"),
         config.get("filename"), config.get("content_type"), row["size_bytes"], page_count,
         totals["chunks"], totals["tokens"], file_id, extractor_version, model),
    ).fetchone()
    version_id = version["version_id"]
    conn.execute(
        """INSERT INTO version_elements (version_id, tenant_id, ordinal, element_type, text, page_number, section_path)
           SELECT %s, %s, ordinal, element_type, text, page_number, section_path
             FROM staging_elements WHERE file_id = %s""",
        (version_id, tenant_id, file_id),
    )
    conn.execute(
        """INSERT INTO version_ocr_pages (version_id, tenant_id, page_number, image_sha256, engine, source_sha256, text,
                                         words)
           SELECT %s, %s, page_number, image_sha256, engine, source_sha256, text, words
             FROM staging_ocr_pages WHERE file_id = %s""",
        (version_id, tenant_id, file_id),
    )
    conn.execute(
        """INSERT INTO chunks (tenant_id, version_id, doc_id, ordinal, text, page_start, page_end, section_path,
                               element_types, token_count, content_hash, text_search_config, section_key)
           SELECT %s, %s, %s, ordinal, text, page_start, page_end, section_path, element_types, token_count,
                  content_hash, text_search_config, section_key
             FROM staging_chunks WHERE file_id = %s ORDER BY ordinal""",
        (tenant_id, version_id, doc_id, file_id),
    )
    # not indexed yet: the HNSW graph takes them after this transaction (vector_backlog.py); search ranks them
    # exactly until then
    conn.execute(
        """INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, model_digest, embedding, indexed)
           SELECT c.chunk_id, %s, %s, %s, sc.embedding, false
             FROM chunks c JOIN staging_chunks sc ON sc.file_id = %s AND sc.ordinal = c.ordinal
            WHERE c.version_id = %s""",
        (tenant_id, model, model_digest, file_id, version_id),
    )
    conn.execute(  # search's late interaction reads them (documents/late_interaction.py)
        """INSERT INTO chunk_token_vectors (chunk_id, tenant_id, model, tokens)
           SELECT c.chunk_id, %s, %s, sc.token_vectors
             FROM chunks c JOIN staging_chunks sc ON sc.file_id = %s AND sc.ordinal = c.ordinal
            WHERE c.version_id = %s AND sc.token_vectors IS NOT NULL""",
        (tenant_id, model, file_id, version_id),
    )
    # each chunk's words in its own language's configuration (documents/languages.py); the version records
    # the set, which search parses a query in
    conn.execute(
        """INSERT INTO chunk_fts (chunk_id, tenant_id, version_id, text_search_config, tsv)
            SELECT chunk_id, tenant_id, version_id, text_search_config,
                   setweight(to_tsvector(text_search_config::regconfig, array_to_string(section_path, ' ')), 'B')
                   || setweight(to_tsvector(text_search_config::regconfig, text), 'A')
              FROM chunks WHERE version_id = %(version)s""",
        {"version": version_id},
    )
    conn.execute(
        """UPDATE document_versions SET text_search_configs = coalesce(
                  (SELECT array_agg(DISTINCT text_search_config ORDER BY text_search_config)
                     FROM chunks WHERE version_id = %(version)s), '{english}')
            WHERE version_id = %(version)s""",
        {"version": version_id},
    )
    if row.get("source_id") is not None:
        conn.execute(
            """UPDATE source_objects SET status = 'active', updated_at = now()
                WHERE source_id = %s AND key = %s AND last_file_id = %s""",
            (row["source_id"], row["source_key"], file_id),
        )
    conn.execute("UPDATE documents SET title = %s, updated_at = now() WHERE doc_id = %s",
                 (config.get("title"), doc_id))
    timings_ms = {**timings_ms, "promote": int((time.perf_counter() - started) * 1000)}
    file_ledger.mark_succeeded(
        conn,
        file_id,
        owner,
        {"timings_ms": timings_ms, "chunks": totals["chunks"], "tokens": int(totals["tokens"]),
         "version_id": version_id, "version_number": version["version_number"]},
    )
    discard(conn, file_id)
    # last: the tenant's serving totals (sql/040) folded while this transaction holds them the shortest
    conn.execute("SELECT fold_tenant_serving_totals(%s)", (tenant_id,))
    failpoint("promote.transaction")  # everything written, nothing committed
    return PromotedVersion(version_id, version["version_number"], totals["chunks"], int(totals["tokens"]),
                           previous["version_id"] if previous else None)


def deactivate_document(conn: psycopg.Connection, tenant_id: str, doc_id: int) -> int | None:
    """Take a document of the tenant out of serving: its active version becomes inactive (no row is
    deleted). Returns the deactivated version id, None when none was active; LookupError when the
    document is not the tenant's."""
    with conn.transaction():
        doc = conn.execute("SELECT doc_id FROM documents WHERE tenant_id = %s AND doc_id = %s",
                           (tenant_id, doc_id)).fetchone()
        if doc is None:
            raise LookupError(f"no document {doc_id}")
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"doc:{doc_id}",))
        row = conn.execute(
            """UPDATE document_versions SET is_active = false, deactivated_at = now()
                WHERE tenant_id = %s AND doc_id = %s AND is_active RETURNING version_id""",
            (tenant_id, doc_id),
        ).fetchone()
        conn.execute("SELECT fold_tenant_serving_totals(%s)", (tenant_id,))
    return row["version_id"] if row else None
