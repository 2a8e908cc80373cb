"""Step 3, ``document_chunks``: chunk the staged elements with the model's tokenizer, a group of files at a time."""

from __future__ import annotations

import functools
import time

from ingestion_pipeline.core.failures import classify
from ingestion_pipeline.core.progress import Progress
from ingestion_pipeline.documents import file_ledger, sections, staging
from ingestion_pipeline.documents.chunking import (
    CONTEXT_TOKENS,
    Chunk,
    TooManyTokens,
    chunk_elements,
    context_line,
    document_label,
    effective_budgets,
)
from ingestion_pipeline.documents.extraction.elements import Element
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.languages import text_search_configs
from ingestion_pipeline.documents.steps.runner import (
    STEP_DONE,
    STEP_ERRORS,
    FileOutcome,
    StepRunner,
    in_pool,
    log,
    ms,
    timings,
)

# files the chunk step reads, chunks and writes together (one transaction of five statements a group), and
# the bytes of their uploads a group holds at most (its elements are in memory at once; a larger file goes
# alone; a re-index, whose upload is gone, counts as 1 MB)
CHUNK_GROUP_FILES = 25
CHUNK_GROUP_BYTES = 16 << 20


def chunk_groups(rows: list[dict]) -> list[list[dict]]:
    """``rows`` in order, cut into groups of at most CHUNK_GROUP_FILES files and CHUNK_GROUP_BYTES."""
    groups: list[list[dict]] = []
    size = 0
    for row in rows:
        n = row.get("size_bytes") or (1 << 20)
        if not groups or len(groups[-1]) == CHUNK_GROUP_FILES or size + n > CHUNK_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(row)
        size += n
    return groups


def chunk_batch(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    """The batch's files in groups of ``CHUNK_GROUP_FILES``: a group's staged elements are read in one
    statement, chunked file by file, and written in one transaction (hold, DELETE, COPY, UPDATE,
    heartbeat) instead of seven round trips a file. Groups go in lanes: the tokenizer of one runs while
    another's statements are the server's. A file that cannot be chunked fails alone; a group whose
    write fails on a file's data is written file by file, so only that file fails."""
    outcomes = run.release_paused(partition_key)
    with run.db.connection() as conn:
        rows = file_ledger.held_rows(conn, partition_key, run.owner)
    run.progress = Progress("chunk", len(rows), sinks=run.progress_sinks)
    groups = chunk_groups(rows)

    def counted(done: list[FileOutcome]) -> None:
        run.progress.advance(files=len(done), chunks=sum(o.stats.get("chunks", 0) for o in done
                                                         if o.status == STEP_DONE))

    for done in in_pool([functools.partial(_chunk_group, run, group) for group in groups],
                         min(run.lanes, run.db.max_size), on_done=counted,
                         on_interrupt=run.db.cancel_statements):
        outcomes += done
    if rows:
        run.progress.finish()
    return outcomes


def _chunk_group(run: StepRunner, rows: list[dict]) -> list[FileOutcome]:
    run_ids = [r["run_id"] for r in rows]
    with run.db.connection() as conn:
        states = staging.staging_states(conn, run_ids)
        elements = staging.read_elements(conn, [i for i in run_ids if i in states
                                                and states[i]["elements_done"] and not states[i]["chunks_done"]])
    outcomes: dict[int, FileOutcome] = {}
    chunked: dict[int, tuple[dict, list[Chunk], dict, int]] = {}  # run id: row, chunks, stats, ms
    for row in rows:
        run_id = row["run_id"]
        state = states.get(run_id)
        if state is not None and state["elements_done"] and state["chunks_done"]:
            outcomes[run_id] = FileOutcome.of(row, STEP_DONE, "chunks already staged")
            continue
        try:
            chunked[run_id] = (row, *_chunk_file(run, row, state, elements.get(run_id, [])))
        except Exception as exc:
            failure = classify(exc)
            if failure.code in STEP_ERRORS:
                raise
            outcomes[run_id] = run.fail(row, failure)
    if chunked:
        try:
            outcomes |= _write_chunks(run, chunked)
        except Exception as exc:
            if classify(exc).code in STEP_ERRORS:
                raise
            log.warning("a group's chunks failed to write (%s): writing its files one by one", exc)
            for run_id, (row, *_) in chunked.items():
                outcomes[run_id] = run.guarded(
                    row, lambda r: _write_chunks(run, {r["run_id"]: chunked[r["run_id"]]})[r["run_id"]])
    return [outcomes[run_id] for run_id in run_ids]


def _chunk_file(run: StepRunner, row: dict, state: dict | None,
                elements: list[Element]) -> tuple[list[Chunk], dict, int]:
    """One file's chunks (each with its context line and language), their figures, and the milliseconds
    chunking took."""
    if state is None or not state["elements_done"]:
        raise ExtractionError("extraction did not complete for this file", code="step_out_of_order")
    start = time.perf_counter()
    counter = run.embedder.token_counter
    target, hard_max = effective_budgets(run.settings.chunk.target_tokens, run.settings.chunk.max_tokens,
                                         counter)
    hard_max -= CONTEXT_TOKENS  # the context line is embedded with the text, under the model's cap
    target = min(target, hard_max)
    limits = run.settings.limits
    config = row.get("config") or {}
    label = document_label(config.get("title"), config.get("filename"))
    planned = sections.plan_sections(elements, limits.unit_characters, sections.recipe(
        target=target, hard_max=hard_max, model_digest=run.embedder.file_info.digest, label=label))
    stored: dict[str, list[Chunk]] = {}
    if len(planned) > 1:  # a revision takes its unchanged sections' chunks from the served version
        with run.db.connection() as conn:
            stored = sections.stored_chunks(conn, row["tenant_id"], row.get("doc_id"), [s.key for s in planned])
    chunks: list[Chunk] = []
    fresh = 0  # chunks made here, not taken from the served version
    spent = 0  # tokens of the sections before
    try:
        for section in planned:
            made = stored.get(section.key)
            if made is None:
                made = chunk_elements(elements[section.start:section.end], counter, target=target,
                                      hard_max=hard_max, max_tokens=limits.max_tokens - spent)
                fresh += len(made)
            if len(planned) > 1:
                for chunk in made:
                    chunk.section_key = section.key
            chunks += made
            spent += sum(c.token_count for c in made)
    except TooManyTokens as exc:
        raise ExtractionError(f"{TooManyTokens(spent + exc.counted, limits.max_tokens)}, over the limit of "
                              f"{limits.max_tokens:,} tokens (INGESTION_MAX_TOKENS_PER_FILE raises it)",
                              code="file_too_much_text") from exc
    if not chunks:
        raise ExtractionError("the file produced no text chunks", code="no_chunks")
    for ordinal, chunk in enumerate(chunks):
        chunk.ordinal = ordinal
        chunk.with_context(context_line(label, chunk.section_path, counter))
    # every chunk's, a stored one's too: a short chunk takes the file's main language, weighed over all of them
    for chunk, language in zip(chunks, text_search_configs([c.text for c in chunks]), strict=True):
        chunk.text_search_config = language
    stats = {"chunks": len(chunks), "tokens": sum(c.token_count for c in chunks),
             "max_chunk_tokens": max(c.token_count for c in chunks)}
    if len(planned) > 1:
        reused = sum(s.key in stored for s in planned)
        stats |= {"sections": len(planned), "sections_reused": reused}
        said = (f"{config.get('filename') or row['run_id']}: {len(planned)} sections, {reused} unchanged since the "
                f"served version (their {len(chunks) - fresh:,} chunks reused)")
        log.info(said)
        for sink in run.progress_sinks:  # the run's log (Dagster's) too
            sink(said)
    if stats["chunks"] > limits.max_chunks or stats["tokens"] > limits.max_tokens:
        raise ExtractionError(
            f"the file makes {stats['chunks']:,} chunks of {stats['tokens']:,} tokens, over the limit of "
            f"{limits.max_chunks:,} chunks and {limits.max_tokens:,} tokens (INGESTION_MAX_CHUNKS_PER_FILE, "
            "INGESTION_MAX_TOKENS_PER_FILE raise them)", code="file_too_much_text")
    return chunks, stats, ms(start)


def _write_chunks(run: StepRunner, chunked: dict[int, tuple[dict, list[Chunk], dict, int]]) -> dict[int, FileOutcome]:
    """Stage the chunks of the files this run still holds, in one transaction; the others are lost."""
    with run.db.transaction() as conn:
        lost = file_ledger.hold_many(conn, list(chunked), run.owner)
        kept = {run_id: item for run_id, item in chunked.items() if run_id not in lost}
        if kept:
            staging.write_chunks(conn, {run_id: (chunks, stats) for run_id, (_, chunks, stats, _) in kept.items()})
            file_ledger.heartbeat_many(conn, {run_id: {**stats, "timings_ms": timings(row, chunk=ms)}
                                       for run_id, (row, _, stats, ms) in kept.items()}, run.owner)
    outcomes = {}
    for run_id, (row, chunks, stats, _) in chunked.items():
        if run_id in lost:
            outcomes[run_id] = FileOutcome.lost(row, lost[run_id])
        else:
            sectioned = f", {stats['sections_reused']} of {stats['sections']} sections unchanged" \
                if "sections" in stats else ""
            outcomes[run_id] = FileOutcome.of(row, STEP_DONE, f"{len(chunks)} chunks{sectioned}", stats)
    return outcomes
