"""``document_chunks`` across several workers (``INGESTION_EXECUTOR=celery``: ``defs/documents/assets.py``).

plan_chunking (which chunks the batch's other files itself) -> one step per part of a big document's changed
sections, on any worker -> assemble_chunks. A batch without a big document is two steps: the plan and an
assembly with nothing to assemble (Dagster runs a collecting step after no mapped step at all).

A document with more text still to chunk than ``INGESTION_CHUNK_PART_CHARACTERS`` (its sections not reused from
the served version) is cut into parts: runs of its changed sections (``documents/sections.py``) of about that many
characters. A section begins only where the chunker closes a chunk anyway, so a part's chunks are the chunks the
whole document gives there. A part reads only its own sections' elements (their bounds are planned with it), counts
and packs them and tells each chunk's own language (a large part of chunking's time) on its worker; its chunks are kept
in ``staging_chunk_parts`` the moment they are made (``sql/043``), and a second delivery of a part finds it kept.
The assembly takes every section's chunks — from its part, from the served version, or (a section no part or version
holds: the served version changed since the plan) chunked there — in order, numbers them, gives each its context
line and a short one the file's main language, checks the file's limits and stages them as the one-step shape does.
A document of less text than a part is chunked whole in the plan's step: a part costs a Celery step, which would
weigh against a part's worth of chunking (benchmarks/big_documents.py --sections --celery measures both).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.documents import file_ledger, sections, staging
from ingestion_pipeline.documents.chunking import Chunk, TooManyTokens
from ingestion_pipeline.documents.extraction.elements import Element
from ingestion_pipeline.documents.languages import own_languages
from ingestion_pipeline.documents.steps.chunk import (
    chunk_batch,
    chunk_group,
    chunk_sections,
    file_sections,
    finish_file,
    too_much_text,
    write_chunks,
)
from ingestion_pipeline.documents.steps.runner import STEP_DONE, FileOutcome, StepRunner, ms

_PART_KEY = re.compile(r"^file_(\d+)_part_(\d+)$")


def part_key(file_id: int, number: int) -> str:
    """The part's name in the run (a Dagster mapping key: letters, digits and underscores)."""
    return f"file_{file_id}_part_{number}"


def cut_into_parts(planned: Sequence[sections.Section], sizes: Sequence[int], part_chars: int
                   ) -> list[list[sections.Section]]:
    """Consecutive sections grouped into parts that close once they hold ``part_chars`` characters (``sizes``:
    each section's), in order; a short last part joins the one before it."""
    parts: list[list[sections.Section]] = []
    held = 0
    for section, size in zip(planned, sizes, strict=True):
        if not parts or held >= part_chars:
            parts.append([])
            held = 0
        parts[-1].append(section)
        held += size
    if len(parts) > 1 and held < part_chars // 2:
        last = parts.pop()
        parts[-1].extend(last)
    return parts


def _text_sizes(conn: psycopg.Connection, file_ids: list[int]) -> dict[int, int]:
    return {r["file_id"]: r["n"] for r in conn.execute(
        "SELECT file_id, sum(length(text)) AS n FROM staging_elements WHERE file_id = ANY(%s) GROUP BY file_id",
        (file_ids,))}


def _stored_keys(conn: psycopg.Connection, row: dict, keys: list[str]) -> set[str]:
    """The keys among ``keys`` whose chunks the document's served version has (the tenant's own)."""
    if row.get("doc_id") is None:
        return set()
    return {r["section_key"] for r in conn.execute(
        """SELECT DISTINCT c.section_key FROM document_versions v JOIN chunks c ON c.version_id = v.version_id
            WHERE v.tenant_id = %s AND v.doc_id = %s AND v.is_active AND c.tenant_id = %s
              AND c.section_key = ANY(%s)""",
        (row["tenant_id"], row["doc_id"], row["tenant_id"], keys))}


def _read_elements(conn: psycopg.Connection, file_id: int, start: int, end: int) -> list[Element]:
    """The file's staged elements ``start`` to ``end`` (exclusive), in order."""
    return [Element(r["element_type"], r["text"], r["page_number"], section_path=list(r["section_path"]))
            for r in conn.execute(
                """SELECT element_type, text, page_number, section_path FROM staging_elements
                    WHERE file_id = %s AND ordinal >= %s AND ordinal < %s ORDER BY ordinal""", (file_id, start, end))]


def _planned_parts(conn: psycopg.Connection, file_id: int) -> list[dict]:
    return conn.execute("SELECT * FROM staging_chunk_parts WHERE file_id = %s ORDER BY part_number",
                        (file_id,)).fetchall()


def plan_chunking(run: StepRunner, partition_key: str) -> tuple[list[str], list[FileOutcome]]:
    """Plan the parts of the batch's big documents and chunk the other files: the parts still to chunk (a part
    already done for the same sections is kept) and each file's outcome."""
    part_chars = run.settings.limits.part_characters
    keys: list[str] = []
    with run.db.connection() as conn:
        file_ids = [r["file_id"] for r in file_ledger.held_rows(conn, partition_key, run.owner)]
        states = staging.staging_states(conn, file_ids)
        sizes = _text_sizes(conn, [i for i in file_ids if i in states and states[i]["elements_done"]
                                   and not states[i]["chunks_done"]])

    def plan_one(row: dict) -> FileOutcome:
        file_id = row["file_id"]
        if file_id in states and states[file_id]["chunks_done"]:
            return FileOutcome.of(row, STEP_DONE, "chunks already staged")
        parts: list[list[sections.Section]] = []
        if sizes.get(file_id, 0) <= part_chars:  # most files: chunked below, nothing to plan
            return FileOutcome.of(row, STEP_DONE, "chunked whole")
        with run.db.connection() as conn:
            elements = staging.read_elements(conn, [file_id])[file_id]
            _, planned = file_sections(run, row, elements)
            stored = _stored_keys(conn, row, [s.key for s in planned]) if len(planned) > 1 else set()
        fresh = [s for s in planned if s.key not in stored]
        fresh_sizes = [sum(len(el.text) for el in elements[s.start:s.end]) for s in fresh]
        if len(fresh) > 1 and sum(fresh_sizes) > part_chars:
            parts = cut_into_parts(fresh, fresh_sizes, part_chars)
        with run.db.transaction() as conn:
            pending = _record_parts(conn, file_id, parts)
        keys.extend(part_key(file_id, n) for n in pending)
        if not parts:
            return FileOutcome.of(row, STEP_DONE, "chunked whole")
        return FileOutcome.of(row, STEP_DONE, f"{len(parts)} parts of {sum(len(p) for p in parts)} changed "
                                              f"sections, {len(pending)} to chunk", {"chunk_parts": len(parts)})

    planned = run.for_each(partition_key, plan_one, "plan chunk parts")
    parted = {o.file_id for o in planned if "chunk_parts" in o.stats}
    outcomes = [o for o in planned if o.status != STEP_DONE or o.file_id in parted]
    return keys, outcomes + chunk_batch(run, partition_key, skip=parted)


def _record_parts(conn: psycopg.Connection, file_id: int, parts: list[list[sections.Section]]) -> list[int]:
    """Keep the file's plan (none: chunked whole); the numbers of the parts still to chunk."""
    conn.execute("DELETE FROM staging_chunk_parts WHERE file_id = %s AND part_number >= %s", (file_id, len(parts)))
    pending = []
    for number, part in enumerate(parts):
        kept = conn.execute(
            """INSERT INTO staging_chunk_parts (file_id, part_number, section_keys, section_bounds)
               VALUES (%s, %s, %s, %s)
               ON CONFLICT (file_id, part_number) DO UPDATE
                  SET section_keys = EXCLUDED.section_keys, section_bounds = EXCLUDED.section_bounds,
                      state = 'pending', chunks = NULL, done_by = NULL, done_at = NULL, chunk_ms = NULL,
                      planned_at = now()
                WHERE staging_chunk_parts.section_keys IS DISTINCT FROM EXCLUDED.section_keys
                   OR staging_chunk_parts.state <> 'done'
               RETURNING part_number""",
            (file_id, number, [s.key for s in part], [i for s in part for i in (s.start, s.end)])).fetchone()
        if kept is not None:
            pending.append(number)
    return pending


def chunk_part(run: StepRunner, partition_key: str, key: str) -> FileOutcome | None:
    """Chunk the part ``key`` (``part_key``) and keep its chunks; None when its file is no longer this run's to
    work on."""
    found = _PART_KEY.match(key)
    if found is None:
        raise ValueError(f"not a part: {key!r}")
    file_id, number = int(found.group(1)), int(found.group(2))
    with run.db.connection() as conn:
        rows = [r for r in file_ledger.held_rows(conn, partition_key, run.owner) if r["file_id"] == file_id]
        part = conn.execute("SELECT * FROM staging_chunk_parts WHERE file_id = %s AND part_number = %s",
                            (file_id, number)).fetchone()
    if not rows:
        return None
    if part is None:
        raise TransientError("step_out_of_order", f"part {number} of the file was not planned")
    if part["state"] == "done":  # kept already: a second delivery of the step
        return FileOutcome.of(rows[0], STEP_DONE, f"part {number} already chunked")

    def chunk(row: dict) -> FileOutcome:
        start = time.perf_counter()
        bounds = part["section_bounds"]  # start, end of each section, in order
        first = bounds[0]
        with run.db.connection() as conn:
            elements = _read_elements(conn, file_id, first, bounds[-1])
            if len(elements) != bounds[-1] - first:  # ordinals with gaps (staged by another release): by position
                elements = staging.read_elements(conn, [file_id])[file_id][first:bounds[-1]]
        own = [sections.Section(n, bounds[2 * n] - first, bounds[2 * n + 1] - first, section)
               for n, section in enumerate(part["section_keys"])]
        limit = run.settings.limits.max_tokens
        try:
            made = chunk_sections(run, elements, own, limit)
        except TooManyTokens as exc:
            raise too_much_text(exc, limit) from exc
        # each chunk's own language told here, on this worker: the assembly only weighs the file's main one
        for c, told in zip(made, own_languages([c.text for c in made]), strict=True):
            c.own_language = told
        with run.db.transaction() as conn:
            lost = file_ledger.hold_many(conn, [file_id], run.owner)
            if lost:
                return FileOutcome.lost(row, lost[file_id])
            conn.execute(
                """UPDATE staging_chunk_parts SET state = 'done', chunks = %s, done_by = %s, done_at = now(),
                          chunk_ms = %s
                    WHERE file_id = %s AND part_number = %s AND section_keys = %s""",
                (Jsonb([_as_json(c) for c in made]), run.owner, ms(start), file_id, number, part["section_keys"]))
        failpoint("chunk.part_done")
        return FileOutcome.of(row, STEP_DONE, f"part {number}: {len(part['section_keys'])} sections, "
                                              f"{len(made)} chunks", {"chunks": len(made)})

    return run.guarded(rows[0], chunk)


def assemble_chunks(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    """Each big document's chunks from its parts, once all are done (a file with a part missing is retried: its
    done parts are kept); a file chunked whole passes (or, its chunks not staged, is chunked here)."""

    def one(row: dict) -> FileOutcome | None:
        file_id = row["file_id"]
        with run.db.connection() as conn:
            state = staging.staging_state(conn, file_id)
            parts = _planned_parts(conn, file_id)
        if state is not None and state["chunks_done"]:  # chunked whole by the plan's step: its figures
            return FileOutcome.of(row, STEP_DONE, "chunks staged", {
                key: state["stats"][key] for key in ("chunks", "tokens") if key in (state["stats"] or {})})
        if not parts:  # chunked whole, unless that step lost the file's chunks: then here
            return chunk_group(run, [row])[0]
        missing = [p["part_number"] for p in parts if p["state"] != "done"]
        if missing:
            raise TransientError("step_out_of_order", f"part(s) {missing} of the file not chunked yet")
        return _assemble(run, row, parts)

    return run.for_each(partition_key, one, "assemble chunks")


def _assemble(run: StepRunner, row: dict, parts: list[dict]) -> FileOutcome:
    start = time.perf_counter()
    file_id = row["file_id"]
    with run.db.connection() as conn:
        elements = staging.read_elements(conn, [file_id])[file_id]
    label, planned = file_sections(run, row, elements)
    by_section: dict[str, list[Chunk]] = {}
    for part in parts:
        for values in part["chunks"]:
            chunk = _from_json(values)
            by_section.setdefault(chunk.section_key or "", []).append(chunk)
    rest = [s.key for s in planned if s.key not in by_section]
    stored: dict[str, list[Chunk]] = {}
    if rest:
        with run.db.connection() as conn:
            stored = sections.stored_chunks(conn, row["tenant_id"], row.get("doc_id"), rest)
    by_section |= stored
    unmade = [s for s in planned if s.key not in by_section]  # neither in a part nor served before
    limit = run.settings.limits.max_tokens
    try:
        for chunk in chunk_sections(run, elements, unmade, limit):
            by_section.setdefault(chunk.section_key or "", []).append(chunk)
    except TooManyTokens as exc:
        raise too_much_text(exc, limit) from exc
    chunks, stats = finish_file(run, row, label, planned, by_section, reused=set(stored))
    stats["chunk_parts"] = len(parts)
    spent = sum(p["chunk_ms"] or 0 for p in parts) + ms(start)  # the chunking's work, on every worker
    return write_chunks(run, {file_id: (row, chunks, stats, spent)})[file_id]


def _as_json(chunk: Chunk) -> list:
    config, letters = chunk.own_language or (None, 0)
    return [chunk.text, chunk.token_count, chunk.page_start, chunk.page_end, chunk.section_path,
            chunk.element_types, chunk.section_key, config, letters]


def _from_json(values: list) -> Chunk:
    text, tokens, page_start, page_end, path, types, key, config, letters = values
    return Chunk(ordinal=0, text=text, token_count=tokens, page_start=page_start, page_end=page_end,
                 section_path=list(path), element_types=list(types), section_key=key, own_language=(config, letters))


def progress(conn: psycopg.Connection, file_id: int) -> dict | None:
    """A file's parts as they are chunked (None for a file not chunked in parts): parts and sections done of all,
    and the workers that did them."""
    row = conn.execute(
        """SELECT count(*) AS parts_total, count(*) FILTER (WHERE state = 'done') AS parts_done,
                  coalesce(sum(cardinality(section_keys)), 0) AS sections_total,
                  coalesce(sum(cardinality(section_keys)) FILTER (WHERE state = 'done'), 0) AS sections_done,
                  coalesce(array_agg(DISTINCT done_by) FILTER (WHERE done_by IS NOT NULL), '{}') AS chunked_by
             FROM staging_chunk_parts WHERE file_id = %s""", (file_id,)).fetchone()
    return dict(row) if row["parts_total"] else None
