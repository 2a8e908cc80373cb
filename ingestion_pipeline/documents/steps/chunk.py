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
from ingestion_pipeline.documents.languages import own_languages, with_main_language
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


def chunk_batch(run: StepRunner, partition_key: str, *, skip: set[int] = frozenset()) -> list[FileOutcome]:
    """The batch's files in groups of ``CHUNK_GROUP_FILES``: a group's staged elements are read in one
    statement, chunked file by file, and written in one transaction (hold, DELETE, COPY, UPDATE,
    heartbeat) instead of seven round trips a file. Groups go in lanes: the tokenizer of one runs while
    another's statements are the server's. A file that cannot be chunked fails alone; a group whose
    write fails on a file's data is written file by file, so only that file fails. ``skip``: files chunked in
    parts (``chunk_parts.py``), passed."""
    outcomes = run.release_paused(partition_key)
    with run.db.connection() as conn:
        rows = file_ledger.held_rows(conn, partition_key, run.owner)
    outcomes += [FileOutcome.of(row, STEP_DONE, "chunked in parts") for row in rows if row["file_id"] in skip]
    rows = [row for row in rows if row["file_id"] not in skip]
    run.progress = Progress("chunk", len(rows), sinks=run.progress_sinks)
    run.mark_step(rows, "chunk")
    groups = chunk_groups(rows)

    def counted(done: list[FileOutcome]) -> None:
        run.progress.advance(files=len(done), chunks=sum(o.stats.get("chunks", 0) for o in done
                                                         if o.status == STEP_DONE))

    for done in in_pool([functools.partial(chunk_group, run, group) for group in groups],
                         min(run.lanes, run.db.max_size), on_done=counted,
                         on_interrupt=run.db.cancel_statements):
        outcomes += done
    if rows:
        run.progress.finish()
    return outcomes


def chunk_group(run: StepRunner, rows: list[dict]) -> list[FileOutcome]:
    file_ids = [r["file_id"] for r in rows]
    with run.db.connection() as conn:
        states = staging.staging_states(conn, file_ids)
        elements = staging.read_elements(conn, [i for i in file_ids if i in states
                                                and states[i]["elements_done"] and not states[i]["chunks_done"]])
    outcomes: dict[int, FileOutcome] = {}
    chunked: dict[int, tuple[dict, list[Chunk], dict, int]] = {}  # run id: row, chunks, stats, ms
    for row in rows:
        file_id = row["file_id"]
        state = states.get(file_id)
        if state is not None and state["elements_done"] and state["chunks_done"]:
            outcomes[file_id] = FileOutcome.of(row, STEP_DONE, "chunks already staged")
            continue
        try:
            chunked[file_id] = (row, *_chunk_file(run, row, state, elements.get(file_id, [])))
        except Exception as exc:
            failure = classify(exc)
            if failure.code in STEP_ERRORS:
                raise
            outcomes[file_id] = run.fail(row, failure)
    if chunked:
        try:
            outcomes |= write_chunks(run, chunked)
        except Exception as exc:
            if classify(exc).code in STEP_ERRORS:
                raise
            log.warning("a group's chunks failed to write (%s): writing its files one by one", exc)
            for file_id, (row, *_) in chunked.items():
                outcomes[file_id] = run.guarded(
                    row, lambda r: write_chunks(run, {r["file_id"]: chunked[r["file_id"]]})[r["file_id"]])
    return [outcomes[file_id] for file_id in file_ids]


def budgets(run: StepRunner) -> tuple[int, int]:
    """The chunk size aimed at and the most tokens a chunk's text may have (its context line is embedded with
    it, under the model's cap)."""
    target, hard_max = effective_budgets(run.settings.chunk.target_tokens, run.settings.chunk.max_tokens,
                                         run.embedder.token_counter)
    hard_max -= CONTEXT_TOKENS
    return min(target, hard_max), hard_max


def file_sections(run: StepRunner, row: dict, elements: list[Element]) -> tuple[str, list[sections.Section]]:
    """The file's label (in every chunk's context line) and its sections (one, keyless, for most files)."""
    target, hard_max = budgets(run)
    config = row.get("config") or {}
    label = document_label(config.get("title"), config.get("filename"))
    return label, sections.plan_sections(elements, run.settings.limits.unit_characters, sections.recipe(
        target=target, hard_max=hard_max, model_digest=run.embedder.file_info.digest, label=label))


def chunk_sections(run: StepRunner, elements: list[Element], planned: list[sections.Section],
                   max_tokens: int) -> list[Chunk]:
    """The chunks of ``planned`` sections of ``elements``, in order, each with its section's key when the file
    is in sections; ``TooManyTokens`` past ``max_tokens``."""
    target, hard_max = budgets(run)
    chunks: list[Chunk] = []
    spent = 0
    for section in planned:
        try:
            made = chunk_elements(elements[section.start:section.end], run.embedder.token_counter, target=target,
                                  hard_max=hard_max, max_tokens=max_tokens - spent)
        except TooManyTokens as exc:
            raise TooManyTokens(spent + exc.counted, max_tokens) from exc
        for chunk in made:
            chunk.section_key = section.key or None
        chunks += made
        spent += sum(c.token_count for c in made)
    return chunks


def too_much_text(exc: TooManyTokens, limit: int) -> ExtractionError:
    """The file's error for ``exc`` raised under what was left of ``limit`` tokens."""
    exc = TooManyTokens(exc.counted + limit - exc.limit, limit)
    return ExtractionError(f"{exc}, over the limit of {limit:,} tokens (INGESTION_MAX_TOKENS_PER_FILE raises it)",
                           code="file_too_much_text")


def _chunk_file(run: StepRunner, row: dict, state: dict | None,
                elements: list[Element]) -> tuple[list[Chunk], dict, int]:
    """One file's chunks (each with its context line and language), their figures, and the milliseconds
    chunking took."""
    if state is None or not state["elements_done"]:
        raise ExtractionError("extraction did not complete for this file", code="step_out_of_order")
    start = time.perf_counter()
    label, planned = file_sections(run, row, elements)
    stored: dict[str, list[Chunk]] = {}
    if len(planned) > 1:  # a revision takes its unchanged sections' chunks from the served version
        with run.db.connection() as conn:
            stored = sections.stored_chunks(conn, row["tenant_id"], row.get("doc_id"), [s.key for s in planned])
    by_section = {s.key: stored[s.key] for s in planned if s.key in stored}
    fresh = [s for s in planned if s.key not in by_section]
    limit = run.settings.limits.max_tokens
    try:
        made = chunk_sections(run, elements, fresh, limit - sum(c.token_count for m in by_section.values() for c in m))
    except TooManyTokens as exc:
        raise too_much_text(exc, limit) from exc
    for chunk in made:
        by_section.setdefault(chunk.section_key or "", []).append(chunk)
    chunks, stats = finish_file(run, row, label, planned, by_section, reused=set(stored) & set(by_section))
    return chunks, stats, ms(start)


def finish_file(run: StepRunner, row: dict, label: str, planned: list[sections.Section],
                by_section: dict[str, list[Chunk]], *, reused: set[str]) -> tuple[list[Chunk], dict]:
    """The file's chunks in section order, numbered, each with its context line and language; their figures;
    the file's limits checked. ``by_section``: every planned section's chunks, by key ("" for a file chunked
    whole); ``reused``: the keys of those taken from the served version."""
    counter = run.embedder.token_counter
    limits = run.settings.limits
    chunks = []
    for section in planned:
        for chunk in by_section.get(section.key, []):
            chunk.section_key = section.key or None  # a stored chunk's too
            chunks.append(chunk)
    if not chunks:
        raise ExtractionError("the file produced no text chunks", code="no_chunks")
    for ordinal, chunk in enumerate(chunks):
        chunk.ordinal = ordinal
        chunk.with_context(context_line(label, chunk.section_path, counter))
    # every chunk's, a stored one's too: a short chunk takes the file's main language, weighed over all of them
    untold = [c for c in chunks if c.own_language is None]  # a part's were told on its worker
    for chunk, own in zip(untold, own_languages([c.text for c in untold]), strict=True):
        chunk.own_language = own
    for chunk, language in zip(chunks, with_main_language([c.own_language for c in chunks]), strict=True):
        chunk.text_search_config = language
    stats = {"chunks": len(chunks), "tokens": sum(c.token_count for c in chunks),
             "max_chunk_tokens": max(c.token_count for c in chunks)}
    if len(planned) > 1:
        stats |= {"sections": len(planned), "sections_reused": len(reused)}
        config = row.get("config") or {}
        said = (f"{config.get('filename') or row['file_id']}: {len(planned)} sections, {len(reused)} unchanged since "
                f"the served version (their {sum(len(by_section[k]) for k in reused):,} chunks reused)")
        log.info(said)
        for sink in run.progress_sinks:  # the run's log (Dagster's) too
            sink(said)
    if stats["chunks"] > limits.max_chunks or stats["tokens"] > limits.max_tokens:
        raise ExtractionError(
            f"the file makes {stats['chunks']:,} chunks of {stats['tokens']:,} tokens, over the limit of "
            f"{limits.max_chunks:,} chunks and {limits.max_tokens:,} tokens (INGESTION_MAX_CHUNKS_PER_FILE, "
            "INGESTION_MAX_TOKENS_PER_FILE raise them)", code="file_too_much_text")
    return chunks, stats


def write_chunks(run: StepRunner, chunked: dict[int, tuple[dict, list[Chunk], dict, int]]) -> dict[int, FileOutcome]:
    """Stage the chunks of the files this run still holds, in one transaction; the others are lost."""
    with run.db.transaction() as conn:
        lost = file_ledger.hold_many(conn, list(chunked), run.owner)
        kept = {file_id: item for file_id, item in chunked.items() if file_id not in lost}
        if kept:
            staging.write_chunks(conn, {file_id: (chunks, stats) for file_id, (_, chunks, stats, _) in kept.items()})
            file_ledger.heartbeat_many(conn, {file_id: {**stats, "timings_ms": timings(row, chunk=ms)}
                                       for file_id, (row, _, stats, ms) in kept.items()}, run.owner)
    outcomes = {}
    for file_id, (row, chunks, stats, _) in chunked.items():
        if file_id in lost:
            outcomes[file_id] = FileOutcome.lost(row, lost[file_id])
        else:
            sectioned = f", {stats['sections_reused']} of {stats['sections']} sections unchanged" \
                if "sections" in stats else ""
            outcomes[file_id] = FileOutcome.of(row, STEP_DONE, f"{len(chunks)} chunks{sectioned}", stats)
    return outcomes
