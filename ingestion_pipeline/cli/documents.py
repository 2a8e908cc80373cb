"""Document commands: submit, process, ingest, documents, search."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import bootstrap, document_pipeline
from ingestion_pipeline.cli.output import print_json, print_rows


def cmd_submit(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.intake import REJECTED, submit_upload

    url = bootstrap()
    pipeline = document_pipeline(url)
    rejected = 0
    for name in args.files:
        result = submit_upload(
            url, pipeline.store, tenant_id=args.tenant, path=Path(name), fingerprint=pipeline.fingerprint,
            max_bytes=pipeline.settings.upload.max_bytes, title=args.title,
        )
        rejected += result.status == REJECTED
        print_json(result.as_dict())
    return 1 if rejected and rejected == len(args.files) else 0


def process_queued(url: str) -> list[dict]:
    """Run every queued batch now, in this process, through the document job and the project's instance."""
    import dagster as dg

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.definitions import defs
    from ingestion_pipeline.defs.ledger.run_status_sensors import finalize_ledger_for_run
    from ingestion_pipeline.defs.partitions import document_batches
    from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource
    from ingestion_pipeline.defs.sources.batch_runs import plan_batch_runs
    from ingestion_pipeline.documents.pipeline import batch_report

    instance = dg.DagsterInstance.get()
    definitions = defs()
    job = definitions.resolve_job_def("document_batch_job")
    postgres, pipeline_resource = PostgresResource(database_url=url), DocumentPipelineResource()
    summaries: list[dict] = []
    done: set[str] = set()
    while True:
        summaries += _process_metric_uploads(instance, definitions, postgres, done)
        batches = plan_batch_runs(instance, postgres, pipeline_resource)
        keys = [k for k in batches.partition_keys if k not in done]
        if not keys:
            return summaries
        if batches.new_partition_keys:
            instance.add_dynamic_partitions(document_batches.name, batches.new_partition_keys)
        for key in keys:
            done.add(key)
            result = job.execute_in_process(
                instance=instance, partition_key=key, tags=batches.tags[key], raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            if not result.success:
                run = instance.get_run_by_id(result.run_id)
                finalize_ledger_for_run(url, run, f"Dagster run {result.run_id} failed before this file finished")
            with connect(url) as conn:
                report = batch_report(conn, key)
            counts = Counter(o.status for o in report)
            summary = {"partition_key": key, "dagster_run_id": result.run_id, "run_success": result.success,
                       "files": len(report), **counts}
            summaries.append(summary)
            print_json({"batch": summary, "files": [
                {"run_id": o.run_id, "file": o.filename, "status": o.status, "detail": o.detail} for o in report
            ]})


def _process_metric_uploads(instance, definitions, postgres, done: set[str]) -> list[dict]:
    """Run each pending metric upload through metric_upload_job, in this process."""
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.defs.metrics.sensors import finalize_upload_for_run, plan_metric_runs
    from ingestion_pipeline.defs.partitions import WORKSPACE_TAG, metric_uploads
    from ingestion_pipeline.metrics.uploads import upload_for_partition

    job = definitions.resolve_job_def("metric_upload_job")
    pending, new_keys = plan_metric_runs(instance, postgres)
    if new_keys:
        instance.add_dynamic_partitions(metric_uploads.name, new_keys)
    summaries = []
    for item in pending:
        key = item["partition_key"]
        if key in done:
            continue
        done.add(key)
        result = job.execute_in_process(
            instance=instance, partition_key=key, tags={WORKSPACE_TAG: item["workspace_id"]}, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
        )
        if not result.success:
            finalize_upload_for_run(postgres.url(), instance.get_run_by_id(result.run_id),
                                    f"Dagster run {result.run_id} failed")
        with connect(postgres.url(), autocommit=True) as conn:
            upload = upload_for_partition(conn, key)
        summary = {"partition_key": key, "dagster_run_id": result.run_id, "run_success": result.success,
                   "upload_id": upload["upload_id"], "status": upload["status"]}
        print_json({"metric_upload": {**summary, "total_rows": upload["total_rows"],
                                       "valid_rows": upload["valid_rows"], "invalid_rows": upload["invalid_rows"],
                                       "promoted_rows": upload["promoted_rows"], "error": upload["error"]}})
        # A failed upload is an answer, not a crash of `process`: it is reported, with its reason.
        summaries.append({**summary, "run_success": True})
    return summaries


def cmd_process(args: argparse.Namespace) -> int:
    url = bootstrap()
    summaries = process_queued(url)
    if not summaries:
        print("nothing queued")
    return 0 if all(s["run_success"] for s in summaries) else 1


def cmd_ingest(args: argparse.Namespace) -> int:
    submitted = cmd_submit(args)
    processed = cmd_process(args)
    return submitted or processed


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents.listing import list_documents

    url = bootstrap()
    with connect(url) as conn:
        rows = list_documents(conn, args.tenant, include_inactive=args.all)
    print_rows(rows, args.json, ["doc_id", "title", "filename", "version_number", "versions", "page_count",
                                  "chunk_count", "token_count"])
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents.search import hybrid_search

    url = bootstrap()
    pipeline = document_pipeline(url)
    vector = pipeline.embedder.embed([args.query])[0]
    with connect(url) as conn:
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
