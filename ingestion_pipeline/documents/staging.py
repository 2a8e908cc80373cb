"""Reads and writes of the document staging tables (scratch state between the asset steps)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.documents.chunking import Chunk
from ingestion_pipeline.documents.extraction.elements import Element, ReadPage, ocr_words


def ensure_staging_row(conn: psycopg.Connection, file_id: int, tenant_id: str) -> None:
    conn.execute(
        "INSERT INTO staging_documents (file_id, tenant_id) VALUES (%s, %s) ON CONFLICT (file_id) DO NOTHING",
        (file_id, tenant_id),
    )


def staging_state(conn: psycopg.Connection, file_id: int) -> dict | None:
    return conn.execute("SELECT * FROM staging_documents WHERE file_id = %s", (file_id,)).fetchone()


def write_elements(conn: psycopg.Connection, file_id: int, elements: Iterable[Element], page_count: int | None,
                   stats: dict) -> int:
    """Replace the file's staged elements (a retried extraction starts clean) and mark the step done."""
    conn.execute("DELETE FROM staging_elements WHERE file_id = %s", (file_id,))
    n = 0
    with conn.cursor().copy(
        "COPY staging_elements (file_id, ordinal, element_type, text, page_number, section_path) FROM STDIN"
    ) as copy:
        for n, el in enumerate(elements, start=1):
            copy.write_row((file_id, n - 1, el.type, el.text, el.page_number, el.section_path))
    conn.execute(
        """UPDATE staging_documents SET elements_done = true, page_count = %s, stats = stats || %s,
                  updated_at = now() WHERE file_id = %s""",
        (page_count, Jsonb(stats), file_id),
    )
    return n


def write_ocr_pages(conn: psycopg.Connection, file_id: int, pages: Iterable[ReadPage]) -> None:
    """Replace the file's staged OCR pages (their text by image digest, kept with the version it becomes)."""
    conn.execute("DELETE FROM staging_ocr_pages WHERE file_id = %s", (file_id,))
    with conn.cursor().copy(
        "COPY staging_ocr_pages (file_id, page_number, image_sha256, engine, source_sha256, text, reused, words)"
        " FROM STDIN"
    ) as copy:
        for page in pages:
            copy.write_row((file_id, page.page_number, page.image_sha256, page.engine, page.source_sha256, page.text,
                            page.reused, None if page.words is None else Jsonb(page.words)))


def reusable_ocr_pages(conn: psycopg.Connection, tenant_id: str, doc_id: int) -> list[ReadPage]:
    """The pages the document's newest version with scanned pages had read by OCR: a new version reuses the
    text of each page whose image is unchanged. Only the tenant's own document's."""
    rows = conn.execute(
        """SELECT page_number, image_sha256, engine, text, source_sha256, words FROM version_ocr_pages
            WHERE tenant_id = %(tenant)s AND version_id = (
                  SELECT v.version_id FROM document_versions v
                   WHERE v.tenant_id = %(tenant)s AND v.doc_id = %(doc)s
                     AND EXISTS (SELECT 1 FROM version_ocr_pages p WHERE p.version_id = v.version_id)
                   ORDER BY v.version_number DESC LIMIT 1)
            ORDER BY page_number""",
        {"tenant": tenant_id, "doc": doc_id})
    return [ReadPage(r["page_number"], r["image_sha256"], r["engine"], r["text"], r["source_sha256"],
                     words=ocr_words(r["words"])) for r in rows]



def stage_version_elements(conn: psycopg.Connection, file_id: int, version_id: int, page_count: int | None) -> int:
    """Stage the elements stored with a promoted version (a re-index) and mark extraction done; its OCR pages go
    along, so the version the re-index makes can lend them to the next."""
    conn.execute("DELETE FROM staging_elements WHERE file_id = %s", (file_id,))
    conn.execute("DELETE FROM staging_ocr_pages WHERE file_id = %s", (file_id,))
    conn.execute(
        """INSERT INTO staging_ocr_pages (file_id, page_number, image_sha256, engine, source_sha256, text, reused,
                                         words)
           SELECT %s, page_number, image_sha256, engine, source_sha256, text, true, words
             FROM version_ocr_pages WHERE version_id = %s""",
        (file_id, version_id))
    n = conn.execute(
        """INSERT INTO staging_elements (file_id, ordinal, element_type, text, page_number, section_path)
           SELECT %s, ordinal, element_type, text, page_number, section_path
             FROM version_elements WHERE version_id = %s""",
        (file_id, version_id),
    ).rowcount
    conn.execute(
        """UPDATE staging_documents SET elements_done = true, page_count = %s, stats = stats || %s,
                  updated_at = now() WHERE file_id = %s""",
        (page_count, Jsonb({"elements": n, "from_version": version_id}), file_id),
    )
    return n


def staging_states(conn: psycopg.Connection, file_ids: list[int]) -> dict[int, dict]:
    """The staging rows of these files (a file not staged yet has none)."""
    return {r["file_id"]: r
            for r in conn.execute("SELECT * FROM staging_documents WHERE file_id = ANY(%s)", (file_ids,))}


def read_elements(conn: psycopg.Connection, file_ids: list[int]) -> dict[int, list[Element]]:
    """The staged elements of these files, each file's in order (one statement)."""
    elements: dict[int, list[Element]] = {file_id: [] for file_id in file_ids}
    for r in conn.execute(
        """SELECT file_id, element_type, text, page_number, section_path FROM staging_elements
            WHERE file_id = ANY(%s) ORDER BY file_id, ordinal""",
        (file_ids,),
    ):
        elements[r["file_id"]].append(Element(r["element_type"], r["text"], r["page_number"],
                                             section_path=list(r["section_path"])))
    return elements


def write_chunks(conn: psycopg.Connection, chunks_by_file: dict[int, tuple[list[Chunk], dict]]) -> None:
    """Replace these files' staged chunks (a retried chunking starts clean) and mark the step done, each file
    with its figures: three statements for any number of files."""
    file_ids = list(chunks_by_file)
    conn.execute("DELETE FROM staging_chunks WHERE file_id = ANY(%s)", (file_ids,))
    with conn.cursor().copy(
        """COPY staging_chunks (file_id, ordinal, text, page_start, page_end, section_path, element_types,
                                token_count, content_hash, embedding_context, text_search_config, section_key)
           FROM STDIN"""
    ) as copy:
        for file_id, (chunks, _) in chunks_by_file.items():
            for c in chunks:
                copy.write_row((file_id, c.ordinal, c.text, c.page_start, c.page_end, c.section_path,
                                c.element_types, c.token_count, c.content_hash, c.context, c.text_search_config,
                                c.section_key))
    conn.execute(
        """UPDATE staging_documents d SET chunks_done = true, stats = d.stats || f.stats, updated_at = now()
             FROM unnest(%s::bigint[], %s::jsonb[]) AS f(file_id, stats)
            WHERE d.file_id = f.file_id""",
        (file_ids, [Jsonb(stats) for _, stats in chunks_by_file.values()]),
    )


# A stored chunk lends its vector only with its token vectors (sql/048): one promoted before they were kept is
# embedded again, so a re-index leaves no chunk without them.
REUSE_STORED_EMBEDDINGS = """UPDATE staging_chunks sc
          SET embedding = found.embedding, token_vectors = found.tokens, embedding_reused = true
         FROM (SELECT s.file_id, s.ordinal, stored.embedding, stored.tokens
                 FROM staging_chunks s
                 JOIN staging_documents d ON d.file_id = s.file_id
                CROSS JOIN LATERAL (
                      SELECT e.embedding, t.tokens
                        FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.chunk_id
                        JOIN chunk_token_vectors t ON t.chunk_id = c.chunk_id AND t.tenant_id = d.tenant_id
                                                  AND t.model = e.model
                       WHERE c.tenant_id = d.tenant_id AND c.content_hash = s.content_hash
                         AND e.tenant_id = d.tenant_id AND e.model = %(model)s AND e.model_digest = %(digest)s
                       LIMIT 1) stored
                WHERE s.file_id = ANY(%(files)s) AND s.embedding IS NULL) found
        WHERE sc.file_id = found.file_id AND sc.ordinal = found.ordinal
    RETURNING sc.file_id"""


def files_with_chunks(conn: psycopg.Connection, file_ids: list[int]) -> set[int]:
    """Those of ``file_ids`` whose chunking completed."""
    return {r["file_id"] for r in conn.execute(
        "SELECT file_id FROM staging_documents WHERE file_id = ANY(%s) AND chunks_done", (file_ids,))}


def reuse_stored_embeddings(conn: psycopg.Connection, file_ids: list[int], model: str, model_digest: str
                            ) -> dict[int, int]:
    """Fill the staged chunks of these files whose exact text is already embedded (the file's tenant, same
    model: name and digest), in one statement; how many each file reused.

    Each staged chunk looks its text up in ``chunks_reuse_idx`` (tenant, content hash) on its own
    (LATERAL ... LIMIT 1). Left to the planner, a tenant its statistics do not know yet (a first load,
    before autoanalyze) was estimated at one row, and every file scanned all the tenant's chunks.
    """
    reused: dict[int, int] = {}
    for row in conn.execute(REUSE_STORED_EMBEDDINGS, {"model": model, "digest": model_digest, "files": file_ids}):
        reused[row["file_id"]] = reused.get(row["file_id"], 0) + 1
    return reused


def pending_embeddings(conn: psycopg.Connection, file_ids: list[int], limit: int) -> list[dict]:
    """Up to ``limit`` chunks of these files still without a vector, shortest first: the model pads a
    batch to its longest text, so texts of one length are encoded together. ``text`` is what the model reads:
    the chunk's context line and its text (``chunking.embedding_input``)."""
    return conn.execute(
        """SELECT file_id, ordinal, token_count,
                  CASE WHEN embedding_context = '' THEN text ELSE embedding_context || E'\\n' || text END AS text
             FROM staging_chunks WHERE file_id = ANY(%s) AND embedding IS NULL
            ORDER BY token_count, file_id, ordinal LIMIT %s""",
        (file_ids, limit),
    ).fetchall()


def missing_embedding_ranges(conn: psycopg.Connection, file_ids: list[int]) -> list[tuple[int, int, int]]:
    """The chunks of these files still without a vector, as (file_id, first ordinal, last ordinal) runs of
    consecutive ordinals, in file and ordinal order."""
    return [(r["file_id"], r["lo"], r["hi"]) for r in conn.execute(
        """SELECT file_id, min(ordinal) AS lo, max(ordinal) AS hi FROM (
               SELECT file_id, ordinal, ordinal - row_number() OVER (PARTITION BY file_id ORDER BY ordinal) AS island
                 FROM staging_chunks WHERE file_id = ANY(%s) AND embedding IS NULL) c
            GROUP BY file_id, island ORDER BY file_id, lo""", (file_ids,))]


def pending_embeddings_in(conn: psycopg.Connection, ranges: list[list[int]], limit: int) -> list[dict]:
    """``pending_embeddings`` within ``ranges`` ([file_id, first ordinal, last ordinal] each): one share's."""
    return conn.execute(
        """SELECT c.file_id, c.ordinal, c.token_count,
                  CASE WHEN c.embedding_context = '' THEN c.text ELSE c.embedding_context || E'\\n' || c.text END
                      AS text
             FROM staging_chunks c
             JOIN unnest(%s::bigint[], %s::int[], %s::int[]) AS r(file_id, lo, hi)
               ON c.file_id = r.file_id AND c.ordinal BETWEEN r.lo AND r.hi
            WHERE c.embedding IS NULL
            ORDER BY c.token_count, c.file_id, c.ordinal LIMIT %s""",
        ([r[0] for r in ranges], [r[1] for r in ranges], [r[2] for r in ranges], limit),
    ).fetchall()


def set_embedding_figures(conn: psycopg.Connection, figures: dict[int, dict]) -> None:
    """Start these files' embedding figures (``embedded``, ``embeddings_reused``, ``model_ms``) over: the shares
    of a fanned-out embed step add to them (``add_embedding_figures``)."""
    file_ids = list(figures)
    conn.execute(
        """UPDATE staging_documents d SET stats = d.stats || f.stats FROM unnest(%s::bigint[], %s::jsonb[])
               AS f(file_id, stats) WHERE d.file_id = f.file_id""",
        (file_ids, [Jsonb(figures[r]) for r in file_ids]))


def add_embedding_figures(conn: psycopg.Connection, figures: dict[int, dict]) -> None:
    """Add a share's ``embedded`` and ``model_ms`` to its files' figures (in the transaction of its vectors, so a
    share delivered twice counts once: the second finds nothing left to encode)."""
    file_ids = list(figures)
    conn.execute(
        """UPDATE staging_documents d
              SET stats = d.stats || jsonb_build_object(
                      'embedded', coalesce((d.stats->>'embedded')::int, 0) + f.embedded,
                      'model_ms', coalesce((d.stats->>'model_ms')::int, 0) + f.model_ms)
             FROM unnest(%s::bigint[], %s::int[], %s::int[]) AS f(file_id, embedded, model_ms)
            WHERE d.file_id = f.file_id""",
        (file_ids, [figures[r]["embedded"] for r in file_ids], [figures[r]["model_ms"] for r in file_ids]))


def embedding_figures(conn: psycopg.Connection, file_ids: list[int]) -> dict[int, dict]:
    """The figures the plan and shares of a fanned-out embed step recorded."""
    keys = ("embedded", "embeddings_reused", "model_ms")
    return {r["file_id"]: {k: int((r["stats"] or {}).get(k) or 0) for k in keys} for r in conn.execute(
        "SELECT file_id, stats FROM staging_documents WHERE file_id = ANY(%s)", (file_ids,))}


def count_missing_embeddings(conn: psycopg.Connection, file_ids: list[int]) -> int:
    """Chunks of these files still without a vector (what the embed step has ahead of it)."""
    return conn.execute("SELECT count(*) AS n FROM staging_chunks WHERE file_id = ANY(%s) AND embedding IS NULL",
                        (file_ids,)).fetchone()["n"]


def missing_embedding_tokens(conn: psycopg.Connection, file_ids: list[int]) -> int:
    """The model's tokens in the chunks of these files still without a vector (what the embed step's time
    follows)."""
    return conn.execute("SELECT coalesce(sum(token_count), 0) AS n FROM staging_chunks WHERE file_id = ANY(%s) "
                        "AND embedding IS NULL", (file_ids,)).fetchone()["n"]


def write_embeddings(conn: psycopg.Connection, file_ids: list[int], ordinals: list[int], vectors: np.ndarray,
                     token_vectors: list[bytes]) -> None:
    """Vector ``i`` and packed token vectors ``i`` (``late_interaction.pack``) of the staged chunk (``file_ids[i]``,
    ``ordinals[i]``), for any number of files at once."""
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE staging_chunks SET embedding = %s, token_vectors = %s WHERE file_id = %s AND ordinal = %s",
            [(vectors[i], token_vectors[i], file_id, ordinal)
             for i, (file_id, ordinal) in enumerate(zip(file_ids, ordinals, strict=True))],
        )


def mark_embeddings_done(conn: psycopg.Connection, stats_by_file: dict[int, dict]) -> None:
    """The embed step is done for these files, each with its figures (one statement)."""
    file_ids = list(stats_by_file)
    conn.execute(
        """UPDATE staging_documents d SET embeddings_done = true, stats = d.stats || f.stats, updated_at = now()
             FROM unnest(%s::bigint[], %s::jsonb[]) AS f(file_id, stats)
            WHERE d.file_id = f.file_id""",
        (file_ids, [Jsonb(stats_by_file[r]) for r in file_ids]),
    )


def remove_expired(conn: psycopg.Connection, older_than_days: float) -> int:
    """Drop the staged work (elements, chunks, vectors) of files that failed, were dead-lettered or canceled
    longer ago than ``older_than_days`` (``INGESTION_FAILED_TTL_DAYS``, like their raw bytes); until then a
    replay resumes from it. Returns how many files' staging went."""
    return conn.execute(
        """DELETE FROM staging_documents s USING ingestion_runs r
            WHERE r.file_id = s.file_id AND r.status IN ('failed', 'dead_letter', 'canceled')
              AND r.finished_at < now() - make_interval(secs => %s)""",
        (older_than_days * 86400,)).rowcount


def discard(conn: psycopg.Connection, file_id: int) -> None:
    conn.execute("DELETE FROM staging_documents WHERE file_id = %s", (file_id,))  # cascades
