"""Document commands: submit, process, ingest, reindex, documents, search."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import Context, bootstrap
from ingestion_pipeline.cli.output import add_json_flag, count_line, emit, print_rows, print_table, wants_json
from ingestion_pipeline.core.progress import install_terminal_reporter


def cmd_submit(args: argparse.Namespace) -> int:
    with bootstrap() as ctx:
        return _submit(ctx, args)


def _submit(ctx: Context, args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.intake import QUEUED, REJECTED, submit_uploads

    launch = _fast_lane(ctx)  # ready before the upload commits: the sensor's loop must not come first
    results = [
        result.as_dict() for result in submit_uploads(
            ctx.db, ctx.document_store, tenant_id=args.tenant, paths=[Path(name) for name in args.files],
            fingerprint=ctx.fingerprint, max_bytes=ctx.settings.upload.max_bytes, title=args.title,
            follow_symlinks=args.follow_symlinks, keys=[args.key] * len(args.files),
        )
    ]

    def render(records: list[dict]) -> None:
        print_table(records, ["filename", "status", "file_id", "doc_id", "reason"])
        print(f"{len(records)} file(s): {count_line([r['status'] for r in records])}")

    emit(args, results, render)
    if launch is not None and any(r["status"] == QUEUED for r in results):
        launch()
    rejected = sum(r["status"] == REJECTED for r in results)
    return 1 if rejected and rejected == len(results) else 0


def _fast_lane(ctx: Context):
    """With a Dagster webserver to ask (INGESTION_DAGSTER_URL, or `make dev` beside), a function that launches
    the small batches' runs now (runtime/fast_lane.py) rather than at the upload sensor's next loop; else None
    (and Dagster is not imported)."""
    from ingestion_pipeline.core.settings import data_dir

    configured = ctx.settings.executor.dagster_url
    if configured == "off" or (not configured and not (data_dir() / "dev.json").exists()):
        return None
    from ingestion_pipeline.runtime.fast_lane import launch_interactive, webserver_url

    url = webserver_url(ctx.settings)
    return (lambda: launch_interactive(ctx.db, ctx.settings, url)) if url else None


def _print_batch(records: list[dict]) -> None:
    for record in records:
        batch = record["batch"]
        statuses = [f["status"] for f in record["files"]]
        print(f"batch {batch['partition_key']} (Dagster run {batch['dagster_run_id'][:8]}"
              f"{'' if batch['run_success'] else ', run failed'}): {len(statuses)} file(s), {count_line(statuses)}")
        for f in record["files"]:
            print(f"  {f['status']:<9} {f['file']:<45} {f['detail']}")


def _print_upload(records: list[dict]) -> None:
    for record in records:
        u = record["metric_upload"]
        print(f"metric upload {u['upload_id']} ({u['partition_key']}): {u['status']}, {u['promoted_rows'] or 0} rows "
              f"promoted, {u['invalid_rows'] or 0} invalid" + (f": {u['error']}" if u["error"] else ""))


def _index_what_is_left(ctx: Context, conn) -> None:
    """Vectors a killed run promoted but did not put into their HNSW graph: searchable already, but ranked exactly
    in every search until indexed; with nothing queued no run's promotion step would take them."""
    from ingestion_pipeline.documents import vector_backlog

    if vector_backlog.pending(conn):
        reporter = install_terminal_reporter()  # vectors, rate, ETA on stderr
        try:
            vector_backlog.index_backlog(ctx.db, connections=ctx.settings.batch.lanes,
                                         nice=ctx.settings.batch.index_nice)
        finally:
            logging.getLogger("ingestion_pipeline.progress").removeHandler(reporter)


def process_queued(ctx: Context, args: argparse.Namespace) -> list[dict]:
    """Run everything queued now, in this process, through the jobs and the project's instance; print each run.

    With nothing queued or claimed in the ledger there is no run to launch and no claim to hand back, so Dagster is
    not started at all (its import and instance were a large part of an unchanged re-ingest, which
    benchmarks/ingest_corpus.py times). The janitor's other work (marking a dead worker's run failed in Dagster
    when it held no claims, forgetting old heartbeats) then waits for the next `process` with work, or the intake
    service's janitor (`ingestion-pipeline intake`, started by `make dev`).
    """
    from ingestion_pipeline.core.ledger import any_unfinished
    from ingestion_pipeline.documents.batching import documents_due
    from ingestion_pipeline.documents.devices import CudaUnavailable
    from ingestion_pipeline.documents.model_decision import HostCannotEmbed, RunHostCannotEmbed

    redis = _redis_jobs_first(ctx, args)
    with ctx.db.connection() as conn:
        if not any_unfinished(conn):
            _index_what_is_left(ctx, conn)
            return []
        if documents_due(conn) and ctx.settings.executor.executor != "celery":  # else the workers embed
            from ingestion_pipeline.documents.extraction.isolation import start_spare_worker

            # the model loads, and the extraction worker starts, while Dagster's instance and code location do
            ctx.embedder.warm_up()
            start_spare_worker(ctx.settings.limits)

    from ingestion_pipeline.definitions import code_location, reconstructable_jobs
    from ingestion_pipeline.defs.partitions import METRIC_JOB
    from ingestion_pipeline.defs.resources import PostgresResource
    from ingestion_pipeline.documents.pipeline import batch_report
    from ingestion_pipeline.metrics.uploads import upload_for_partition
    from ingestion_pipeline.runtime.launching import ProcessedRun, run_queued_in_process
    from ingestion_pipeline.runtime.pooled_instance import pooled_instance

    summaries: list[dict] = []

    def report(run: ProcessedRun) -> None:
        with ctx.db.connection() as conn:
            if run.job_name == METRIC_JOB:
                upload = upload_for_partition(conn, run.partition_key)
                summary = {"partition_key": run.partition_key, "dagster_run_id": run.dagster_run_id,
                           "run_success": run.success, "upload_id": upload.upload_id, "status": upload.status}
                record = {"metric_upload": {**summary, "total_rows": upload.total_rows,
                                            "valid_rows": upload.valid_rows, "invalid_rows": upload.invalid_rows,
                                            "promoted_rows": upload.promoted_rows, "error": upload.error}}
                # A failed upload is an answer, not a crash of `process`: it is reported, with its reason.
                summaries.append({**summary, "run_success": True})
                emit(args, [record], _print_upload)
                return
            files = batch_report(conn, run.partition_key)
        summary = {"partition_key": run.partition_key, "dagster_run_id": run.dagster_run_id,
                   "run_success": run.success, "files": len(files), **Counter(o.status for o in files)}
        summaries.append(summary)
        record = {"batch": summary, "files": [
            {"file_id": o.file_id, "run_id": o.file_id, "file": o.filename, "status": o.status, "detail": o.detail}
            for o in files
        ]}
        emit(args, [record], _print_batch)

    resources = {"postgres": PostgresResource(database_url=ctx.url), "embedder": ctx.embedder}
    reporter = install_terminal_reporter()  # files, chunks, rate, ETA of each step, on stderr
    try:
        with interruptible() as interrupted, _following_job_statuses(ctx, redis):
            run_queued_in_process(pooled_instance(), code_location(), ctx.db, ctx.settings, resources, on_run=report,
                                  interrupted=interrupted.is_set, reconstructable_jobs=reconstructable_jobs())
    except RunHostCannotEmbed:
        # this process's own model was the cause: its error says which decision and what to run (exit 5 either way)
        if isinstance(ctx.embedder.load_error, (HostCannotEmbed, CudaUnavailable)):
            raise ctx.embedder.load_error from None
        raise
    finally:
        logging.getLogger("ingestion_pipeline.progress").removeHandler(reporter)
    return summaries


def _redis_jobs_first(ctx: Context, args: argparse.Namespace):
    """The Redis queue's jobs into the ledger before anything runs (the client, or None: no queue)."""
    from ingestion_pipeline.cli.queues import take_queued_jobs
    from ingestion_pipeline.queues.redis_consumer import RedisUnavailable

    try:
        return take_queued_jobs(ctx, args)
    except RedisUnavailable as exc:  # the ledger's own work still runs; the jobs wait on the queue
        print(f"warning: {exc}", file=sys.stderr)
        return None


@contextmanager
def _following_job_statuses(ctx: Context, redis) -> Iterator[None]:
    if redis is None:
        yield
        return
    from ingestion_pipeline.queues.redis_consumer import following_statuses

    with following_statuses(redis, ctx.db):
        yield


@contextmanager
def interruptible() -> Iterator[threading.Event]:
    """Ctrl-C and SIGTERM interrupt the run in progress (once); the event tells that it happened."""
    interrupted = threading.Event()

    def on_signal(signum, _frame) -> None:
        if not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_process(args: argparse.Namespace) -> int:
    try:
        with bootstrap() as ctx:
            summaries = process_queued(ctx, args)
    except _interruptions() as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130
    return _processed_exit_code(args, summaries)


def cmd_ingest(args: argparse.Namespace) -> int:
    with bootstrap() as ctx:  # one database pool and migration check for both halves
        submitted = _submit(ctx, args)
        try:
            summaries = process_queued(ctx, args)
        except _interruptions() as exc:
            print(f"interrupted: {exc}", file=sys.stderr)
            return 130
    return submitted or _processed_exit_code(args, summaries)


def _interruptions() -> tuple[type[BaseException], ...]:
    """What ends `process` as interrupted (exit 130). Called only when something was raised: importing
    Dagster first would delay the model's warm-up, which starts before Dagster is imported."""
    from ingestion_pipeline.runtime.launching import Interrupted

    return Interrupted, KeyboardInterrupt


def _processed_exit_code(args: argparse.Namespace, summaries: list[dict]) -> int:
    if not summaries and not wants_json(args):
        print("nothing queued")
    return 0 if all(s["run_success"] for s in summaries) else 1


def cmd_reindex(args: argparse.Namespace) -> int:
    """Queue a re-index of every stale active version (or every one, ``--all``); ``--process`` runs them now."""
    from ingestion_pipeline.core.tenants import validate_tenant_id
    from ingestion_pipeline.documents import reindex

    if args.tenant:
        validate_tenant_id(args.tenant)
    with bootstrap() as ctx:
        with ctx.db.transaction() as conn:
            plan = reindex.find_versions(conn, ctx.fingerprint_for, tenant_id=args.tenant, stale_only=not args.all)
            if not args.dry_run:
                reindex.queue(conn, plan, force=args.all)
        records = [{"tenant_id": v.tenant_id, "doc_id": v.doc_id, "version": v.version_number, "file": v.filename,
                    "fingerprint": v.fingerprint,
                    "status": "would re-index" if args.dry_run
                    else "already queued" if v.version_id in plan.already_queued else "queued",
                    "reason": ""} for v in plan.reindexable]
        records += [{"tenant_id": v.tenant_id, "doc_id": v.doc_id, "version": v.version_number, "file": v.filename,
                     "fingerprint": v.fingerprint, "status": "needs file", "reason": v.reason}
                    for v in plan.needs_file]
        summary = {"current_fingerprint": plan.current_fingerprint, "active": plan.active, "current": plan.current,
                   "reindexable": len(plan.reindexable), "needs_file": len(plan.needs_file),
                   "queued": len(plan.queued_file_ids), "already_queued": len(plan.already_queued),
                   "dry_run": args.dry_run}

        def render(_records: list[dict]) -> None:
            if records:
                print_table(records, ["tenant_id", "doc_id", "version", "file", "status", "reason"])
            print(f"pipeline fingerprint {plan.current_fingerprint}: {plan.summary()}")
            if not plan.reindexable:
                print("nothing to re-index" + (" (every active version is current)" if not plan.stale else ""))
            elif not args.dry_run and not args.process:
                print("run `ingestion-pipeline process` to re-index now (the upload sensor launches them under "
                      "`make dev`)")

        emit(args, [{"reindex": summary, "versions": records}], render)
        if args.process and not args.dry_run and (plan.queued_file_ids or plan.already_queued):
            summaries = process_queued(ctx, args)
            return 0 if all(s["run_success"] for s in summaries) else 1
    return 0


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.listing import list_documents
    from ingestion_pipeline.documents.promotion import deactivate_document

    if not getattr(args, "tenant", None):
        raise ValueError("--tenant is required")
    if args.documents_command == "deactivate":
        with bootstrap() as ctx, ctx.db.connection() as conn:
            try:
                version_id = deactivate_document(conn, args.tenant, args.doc_id)
            except LookupError as exc:
                raise ValueError(f"{exc} for tenant {args.tenant}") from exc
        record = {"doc_id": args.doc_id, "deactivated_version_id": version_id}
        emit(args, [record], lambda r: print(
            f"document {args.doc_id}: " + (f"version id {version_id} deactivated" if version_id
                                           else "no active version (nothing to do)")))
        return 0
    with bootstrap() as ctx, ctx.db.connection() as conn:
        rows = list_documents(conn, args.tenant, status="all" if args.all else "active")
    print_rows(args, rows, ["doc_id", "title", "filename", "version_number", "versions", "page_count",
                                  "chunk_count", "token_count"])
    return 0


def _moment(text: str) -> datetime:
    """A date or a date and time (ISO 8601); without a zone, UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (2026-12-01, or 2026-12-01T09:30)") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def cmd_search(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.search import hybrid_search
    from ingestion_pipeline.documents.search_filters import search_filter

    only = search_filter(doc_ids=args.doc_id, source=args.source, file_types=args.file_types,
                         languages=args.languages, since=args.since, until=args.until)
    with bootstrap() as ctx:
        embedders = ctx.query_embedders
        vector, tokens = embedders.embedder.embed_query(args.query)
        with ctx.db.connection() as conn:
            hits = hybrid_search(conn, tenant_id=args.tenant, query=args.query, query_vector=vector, k=args.k,
                                 model=embedders.model, neighbours=args.context,
                                 other_models=embedders.for_query(args.query), query_tokens=tokens, only=only)

    def render(records: list[dict]) -> None:
        if not records:
            print("no results")
        for rank, h in enumerate(hits, start=1):
            text = "\n".join([*h.context_before, h.text, *h.context_after]) if args.context else h.text
            snippet = " ".join(text.split())[:300 * (1 + 2 * args.context)]
            also = f"\n   also in: {'; '.join(h.also_in)}" if h.also_in else ""
            print(f"{rank}. [{h.score:.4f}] {h.citation()}\n   {snippet}{also}\n")

    emit(args, [h.as_dict() for h in hits], render)
    return 0


def register(sub) -> None:
    """Add submit, process, ingest, reindex, documents and search to the top-level subparsers."""

    def add_files(p: argparse.ArgumentParser) -> None:
        p.add_argument("files", nargs="+", metavar="FILE")
        p.add_argument("--tenant", required=True)
        p.add_argument("--title", help="title for the document(s); default: the file name")
        p.add_argument("--follow-symlinks", action="store_true",
                       help="read what a symbolic link points to (refused by default)")
        p.add_argument("--key", help="a stable document key: a later upload under it is a new version of the "
                                     "same document (default: identity by content)")

    p = sub.add_parser("submit", help="queue uploads (a table of what happened to each file)")
    add_files(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("process", help="run everything queued, now, and wait")
    add_json_flag(p)
    p.set_defaults(func=cmd_process)

    p = sub.add_parser("ingest", help="submit + process")
    add_files(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("reindex", help="chunk and embed active versions again after a pipeline change (from their "
                                       "stored elements), as batches like uploads")
    p.add_argument("--tenant", help="one tenant (default: every tenant)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--stale-only", action="store_true", default=True,
                       help="only versions whose pipeline fingerprint differs from the current one (the default)")
    scope.add_argument("--all", action="store_true", help="every active version, current ones too")
    p.add_argument("--dry-run", action="store_true", help="say what would be re-indexed; queue nothing")
    p.add_argument("--process", action="store_true", help="run the queued re-indexes now and wait (as `process`)")
    add_json_flag(p)
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("documents", help="a tenant's documents and their active versions; `deactivate DOC_ID`")
    p.add_argument("--tenant")
    p.add_argument("--all", action="store_true", help="include documents with no active version")
    add_json_flag(p)
    p.set_defaults(func=cmd_documents, documents_command=None)
    documents_sub = p.add_subparsers(dest="documents_command")
    deactivate = documents_sub.add_parser("deactivate", help="stop serving a document (no row is deleted)")
    deactivate.add_argument("doc_id", type=int)
    deactivate.add_argument("--tenant", default=argparse.SUPPRESS)
    add_json_flag(deactivate)

    p = sub.add_parser("search", help="hybrid search over a tenant's active versions, with citations")
    p.add_argument("query")
    p.add_argument("--tenant", required=True)
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--context", type=int, default=0, choices=range(4), metavar="N",
                   help="also show the N chunks before and after each hit (0-3; default 0)")
    narrow = p.add_argument_group("filters (the admitted chunks ranked exactly)")
    narrow.add_argument("--doc-id", type=int, action="append", default=[], metavar="ID", help="only this document "
                        "(repeatable)")
    narrow.add_argument("--source", metavar="PREFIX", help="only documents whose source URI starts so")
    narrow.add_argument("--type", action="append", default=[], dest="file_types", metavar="EXT",
                        help="only this file type: pdf, docx (repeatable)")
    narrow.add_argument("--language", action="append", default=[], dest="languages", metavar="CONFIG",
                        help="only chunks in this language: english, french (repeatable)")
    narrow.add_argument("--since", type=_moment, metavar="DATE", help="only versions served from then on")
    narrow.add_argument("--until", type=_moment, metavar="DATE", help="only versions served before then")
    add_json_flag(p)
    p.set_defaults(func=cmd_search)
