"""Step 4, ``document_embeddings``: vectors for every staged chunk of the batch, reused where the text is unchanged."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import classify
from ingestion_pipeline.core.progress import Progress
from ingestion_pipeline.documents import file_ledger, late_interaction, staging
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.steps.runner import (
    STEP_DONE,
    STEP_ERRORS,
    FileOutcome,
    StepRunner,
    ms,
    timings,
)


@dataclass
class _Embedding:
    """A file in the embed step: its ledger row and the figures it will record."""

    row: dict
    stats: dict


def embed_batch(run: StepRunner, partition_key: str, *, after_shares: bool = False) -> list[FileOutcome]:
    """Vectors for every staged chunk of the batch's files, encoded *across* files.

    Each file first reuses the stored vectors of its unchanged chunk texts. The chunks still without
    a vector, of all the files together, are then encoded in committed units sorted by token count
    (a small file no longer pays its own ``encode`` call, and similar lengths pad little). If a unit
    fails to encode, its files are encoded one by one so that only the file at fault fails.
    """
    outcomes = run.release_paused(partition_key)
    with run.db.connection() as conn:
        rows = file_ledger.held_rows(conn, partition_key, run.owner)
        ahead = staging.count_missing_embeddings(conn, [r["file_id"] for r in rows]) if rows else None
    run.progress = Progress("embed", len(rows), total_chunks=ahead, sinks=run.progress_sinks)
    run.mark_step(rows, "embed")
    start = time.perf_counter()
    work: dict[int, _Embedding] = {}
    if rows:
        outcomes += _reuse_embeddings(run, rows, work)
    if work:  # the ETA from here follows the tokens left to encode
        with run.db.connection() as conn:
            run.progress.count_tokens(staging.missing_embedding_tokens(conn, list(work)))
    unit = run.settings.embedding.batch_size * 16  # one committed unit: enough texts to sort by length
    while work:
        with run.db.connection() as conn:
            pending = staging.pending_embeddings(conn, list(work), unit)
        if not pending:
            break
        outcomes += _embed_unit(run, pending, work)
        failpoint("embed.unit")  # one unit committed, the next not yet
    if after_shares and work:
        with run.db.connection() as conn:
            recorded = staging.embedding_figures(conn, list(work))
        for file_id, item in work.items():
            for key, value in recorded.get(file_id, {}).items():
                item.stats[key] += value
    for item in work.values():
        item.stats["timings_ms"] = timings(item.row, embed=ms(start))
    outcomes += _finish_embedding(run, work)
    if rows:
        run.progress.finish()
    return outcomes


def _reuse_embeddings(run: StepRunner, rows: list[dict], work: dict[int, _Embedding]) -> list[FileOutcome]:
    """The batch's files take the stored vectors of their unchanged chunk texts, in one transaction of
    three statements; each file held (and chunked) joins ``work``, the others leave with their outcome."""
    file_ids = [r["file_id"] for r in rows]
    with run.db.transaction() as conn:
        lost = file_ledger.hold_many(conn, file_ids, run.owner)
        chunked = staging.files_with_chunks(conn, [r for r in file_ids if r not in lost])
        reused = staging.reuse_stored_embeddings(conn, sorted(chunked), run.model.name, run.model.vectors_digest)
    outcomes = []
    for row in rows:
        file_id = row["file_id"]
        if file_id in lost:
            outcomes.append(FileOutcome.lost(row, lost[file_id]))
        elif file_id not in chunked:
            outcomes.append(run.fail(row, classify(ExtractionError(
                "chunking did not complete for this file", code="step_out_of_order"))))
        else:
            work[file_id] = _Embedding(row, {"embedded": 0, "embeddings_reused": reused.get(file_id, 0),
                                            "model_ms": 0})
    # vectors of identical chunk text, not encoded again
    run.progress.advance(chunks=sum(reused.values()), files=len(outcomes))
    return outcomes


def _embed_unit(run: StepRunner, pending: list[dict], work: dict[int, _Embedding], *,
                record: bool = False) -> list[FileOutcome]:
    """Encode one unit (chunks of one or more files) and commit its vectors; files that lost their
    claim, or whose text cannot be encoded, leave the work with their outcome. ``record``: the unit's figures
    are added to its files' staged figures in the same transaction (a share of a fanned-out step)."""
    model_start = time.perf_counter()
    try:
        # outside any transaction; the token vectors search's late interaction reads come from the same inference
        vectors, tokens = run.embedder.embed_with_tokens([p["text"] for p in pending])
    except Exception as exc:
        if classify(exc).code in STEP_ERRORS:
            raise
        return _embed_files_alone(run, pending, work)
    model_ms = ms(model_start)
    by_file: dict[int, list[int]] = {}
    for i, p in enumerate(pending):
        by_file.setdefault(p["file_id"], []).append(i)
    outcomes = []
    with run.db.transaction() as conn:  # the unit's files: one statement holds them, one executemany writes
        lost = file_ledger.hold_many(conn, list(by_file), run.owner)
        for file_id, reason in lost.items():  # a file that lost its claim leaves the others' vectors
            item = work.pop(file_id)
            outcomes.append(FileOutcome.lost(item.row, reason))
        kept = [i for i, p in enumerate(pending) if p["file_id"] not in lost]
        if kept:
            staging.write_embeddings(conn, [pending[i]["file_id"] for i in kept],
                                     [pending[i]["ordinal"] for i in kept], vectors[kept],
                                     [late_interaction.pack(tokens[i]) for i in kept])
            if record:
                staging.add_embedding_figures(conn, {
                    file_id: {"embedded": len(indexes), "model_ms": model_ms * len(indexes) // len(pending)}
                    for file_id, indexes in by_file.items() if file_id not in lost})
    for file_id, indexes in by_file.items():
        if file_id not in lost:
            stats = work[file_id].stats
            stats["embedded"] += len(indexes)
            stats["model_ms"] += model_ms * len(indexes) // len(pending)
    run.progress.advance(chunks=len(pending), files=len(outcomes), tokens=sum(p["token_count"] for p in pending))
    return outcomes


def _embed_files_alone(run: StepRunner, pending: list[dict], work: dict[int, _Embedding]) -> list[FileOutcome]:
    """A unit failed to encode: encode each of its files' texts alone, failing only the one at fault."""
    outcomes = []
    for file_id in dict.fromkeys(p["file_id"] for p in pending):
        texts = [p["text"] for p in pending if p["file_id"] == file_id]
        try:
            run.embedder.embed_with_tokens(texts)
        except Exception as exc:
            failure = classify(exc)
            if failure.code in STEP_ERRORS:
                raise
            outcomes.append(run.fail(work.pop(file_id).row, failure))
            run.progress.advance(files=1)
    if not outcomes:  # it failed together but not alone: the model's trouble, not a file's
        raise RuntimeError("a unit of chunks failed to encode, yet each of its files encodes alone")
    return outcomes


def _finish_embedding(run: StepRunner, work: dict[int, _Embedding]) -> list[FileOutcome]:
    """Every file left in ``work`` has all its vectors: mark them done, with their figures, in one
    transaction of three statements."""
    stats = {file_id: work[file_id].stats for file_id in sorted(work)}
    if not stats:
        return []
    with run.db.transaction() as conn:
        lost = file_ledger.hold_many(conn, list(stats), run.owner)
        done = {file_id: figures for file_id, figures in stats.items() if file_id not in lost}
        if done:
            staging.mark_embeddings_done(conn, done)
            file_ledger.heartbeat_many(conn, done, run.owner)  # held by the statement above: none is lost here
    outcomes = []
    for file_id, figures in stats.items():
        row = work[file_id].row
        if file_id in lost:
            outcomes.append(FileOutcome.lost(row, lost[file_id]))
        else:
            outcomes.append(FileOutcome.of(row, STEP_DONE,
                                        f"{figures['embedded']} embedded, {figures['embeddings_reused']} reused",
                                        figures))
    run.progress.advance(files=len(outcomes))
    return outcomes


# -- the fanned-out shape (INGESTION_EXECUTOR=celery: defs/documents/assets.py) ---------------------------------
# plan_shares -> one step per share of the chunks still to encode, on any embedding worker -> embed_batch
# (after_shares). Vectors and figures live in staging, so a share may run on another host and run again.

def plan_embedding(run: StepRunner, partition_key: str) -> tuple[list[list[list[int]]], list[FileOutcome]]:
    """Reuse the stored vectors of unchanged chunk text, then cut the chunks still to encode into shares of about
    ``INGESTION_EMBEDDING_SHARE_CHUNKS`` (each a list of [file_id, first ordinal, last ordinal] ranges)."""
    outcomes = run.release_paused(partition_key)
    with run.db.connection() as conn:
        rows = file_ledger.held_rows(conn, partition_key, run.owner)
    run.progress = Progress("plan embedding", len(rows), sinks=run.progress_sinks)
    work: dict[int, _Embedding] = {}
    if rows:
        outcomes += _reuse_embeddings(run, rows, work)
    if not work:
        return [], outcomes
    with run.db.transaction() as conn:
        staging.set_embedding_figures(conn, {file_id: item.stats for file_id, item in work.items()})
        missing = staging.missing_embedding_ranges(conn, list(work))
    shares = cut_into_shares(missing, run.settings.embedding.share_chunks)
    outcomes += [FileOutcome.of(item.row, STEP_DONE, f"{item.stats['embeddings_reused']} vectors reused")
                 for item in work.values()]
    return shares, outcomes


def cut_into_shares(ranges: list[tuple[int, int, int]], size: int) -> list[list[list[int]]]:
    """Consecutive runs of chunks cut into shares of ``size`` chunks (the last may be smaller), in order."""
    shares: list[list[list[int]]] = []
    current: list[list[int]] = []
    room = size
    for file_id, lo, hi in ranges:
        while lo <= hi:
            take = min(room, hi - lo + 1)
            current.append([file_id, lo, lo + take - 1])
            lo, room = lo + take, room - take
            if room == 0:
                shares.append(current)
                current, room = [], size
    if current:
        shares.append(current)
    return shares


def embed_share(run: StepRunner, partition_key: str, ranges: list[list[int]]) -> list[FileOutcome]:
    """Encode the chunks of ``ranges`` still without a vector and commit them unit by unit, with their figures;
    a file no longer held is left alone. The files are finished by ``embed_batch(after_shares=True)``."""
    with run.db.connection() as conn:
        rows = [r for r in file_ledger.held_rows(conn, partition_key, run.owner)
                if r["file_id"] in {r[0] for r in ranges}]
        ahead = staging.count_missing_embeddings(conn, [r["file_id"] for r in rows]) if rows else 0
    work = {r["file_id"]: _Embedding(r, {"embedded": 0, "embeddings_reused": 0, "model_ms": 0}) for r in rows}
    run.progress = Progress("embed share", len(rows), total_chunks=ahead, sinks=run.progress_sinks)
    run.mark_step(rows, "embed")
    outcomes: list[FileOutcome] = []
    unit = run.settings.embedding.batch_size * 16
    while work:
        held = [r for r in ranges if r[0] in work]
        with run.db.connection() as conn:
            pending = staging.pending_embeddings_in(conn, held, unit)
        if not pending:
            break
        outcomes += _embed_unit(run, pending, work, record=True)
        failpoint("embed.unit")
    outcomes += [FileOutcome.of(item.row, STEP_DONE, f"{item.stats['embedded']} embedded", item.stats)
                 for item in work.values()]
    if rows:
        run.progress.finish()
    return outcomes
