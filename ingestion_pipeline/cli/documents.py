"""Document commands: submit, process, ingest, documents, search."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import Context, bootstrap
from ingestion_pipeline.cli.output import print_json, print_rows


def cmd_submit(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.intake import REJECTED, submit_upload

    with bootstrap() as ctx:
        rejected = 0
        for name in args.files:
            result = submit_upload(
                ctx.db, ctx.document_store, tenant_id=args.tenant, path=Path(name), fingerprint=ctx.fingerprint,
                max_bytes=ctx.settings.upload.max_bytes, title=args.title,
            )
            rejected += result.status == REJECTED
            print_json(result.as_dict())
    return 1 if rejected and rejected == len(args.files) else 0


def process_queued(ctx: Context) -> list[dict]:
    """Run everything queued now, in this process, through the jobs and the project's instance; print each run."""
    import dagster as dg

    from ingestion_pipeline.definitions import defs
    from ingestion_pipeline.defs.launching import METRIC_JOB, ProcessedRun, run_queued_in_process
    from ingestion_pipeline.defs.resources import PostgresResource
    from ingestion_pipeline.documents.pipeline import batch_report
    from ingestion_pipeline.metrics.uploads import upload_for_partition

    summaries: list[dict] = []

    def report(run: ProcessedRun) -> None:
        with ctx.db.connection() as conn:
            if run.job_name == METRIC_JOB:
                upload = upload_for_partition(conn, run.partition_key)
                summary = {"partition_key": run.partition_key, "dagster_run_id": run.dagster_run_id,
                           "run_success": run.success, "upload_id": upload["upload_id"], "status": upload["status"]}
                print_json({"metric_upload": {**summary, "total_rows": upload["total_rows"],
                                              "valid_rows": upload["valid_rows"],
                                              "invalid_rows": upload["invalid_rows"],
                                              "promoted_rows": upload["promoted_rows"], "error": upload["error"]}})
                # A failed upload is an answer, not a crash of `process`: it is reported, with its reason.
                summaries.append({**summary, "run_success": True})
                return
            files = batch_report(conn, run.partition_key)
        summary = {"partition_key": run.partition_key, "dagster_run_id": run.dagster_run_id,
                   "run_success": run.success, "files": len(files), **Counter(o.status for o in files)}
        summaries.append(summary)
        print_json({"batch": summary, "files": [
            {"run_id": o.run_id, "file": o.filename, "status": o.status, "detail": o.detail} for o in files
        ]})

    resources = {"postgres": PostgresResource(database_url=ctx.url), "embedder": ctx.embedder}
    run_queued_in_process(dg.DagsterInstance.get(), defs(), ctx.db, ctx.settings.batch, resources, on_run=report)
    return summaries


def cmd_process(args: argparse.Namespace) -> int:
    with bootstrap() as ctx:
        summaries = process_queued(ctx)
    if not summaries:
        print("nothing queued")
    return 0 if all(s["run_success"] for s in summaries) else 1


def cmd_ingest(args: argparse.Namespace) -> int:
    submitted = cmd_submit(args)
    processed = cmd_process(args)
    return submitted or processed


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.listing import list_documents

    with bootstrap() as ctx, ctx.db.connection() as conn:
        rows = list_documents(conn, args.tenant, include_inactive=args.all)
    print_rows(rows, args.json, ["doc_id", "title", "filename", "version_number", "versions", "page_count",
                                  "chunk_count", "token_count"])
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.search import hybrid_search

    with bootstrap() as ctx:
        vector = ctx.embedder.embed([args.query])[0]
        with ctx.db.connection() as conn:
            hits = hybrid_search(conn, tenant_id=args.tenant, query=args.query, query_vector=vector, k=args.k)
    if args.json:
        for h in hits:
            print_json(h.as_dict())
        return 0
    if not hits:
        print("no results")
    for rank, h in enumerate(hits, start=1):
        snippet = " ".join(h.text.split())[:300]
        print(f"{rank}. [{h.score:.4f}] {h.citation()}\n   {snippet}\n")
    return 0


def register(sub) -> None:
    """Add submit, process, ingest, documents and search to the top-level subparsers."""

    def add_files(p: argparse.ArgumentParser) -> None:
        p.add_argument("files", nargs="+", metavar="FILE")
        p.add_argument("--tenant", required=True)
        p.add_argument("--title", help="title for the document(s); default: the file name")

    p = sub.add_parser("submit", help="queue uploads; one JSON line per file")
    add_files(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("process", help="run everything queued, now, and wait")
    p.set_defaults(func=cmd_process)

    p = sub.add_parser("ingest", help="submit + process")
    add_files(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("documents", help="a tenant's documents and their active versions")
    p.add_argument("--tenant", required=True)
    p.add_argument("--all", action="store_true", help="include documents with no active version")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_documents)

    p = sub.add_parser("search", help="hybrid search over a tenant's active versions, with citations")
    p.add_argument("query")
    p.add_argument("--tenant", required=True)
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)
