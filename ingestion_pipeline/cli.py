"""The `ingestion-pipeline` command: submit, process, inspect and search, without the Dagster daemon.

Every command uses DATABASE_URL when set, else the embedded Postgres under `.data/`; the Dagster
instance is the project's `dagster.yaml` (DAGSTER_HOME = the project root), so runs started here show
in the UI of `make dev`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ingestion_pipeline.core.settings import project_root


def _bootstrap() -> str:
    """Resolve databases, point Dagster at the project's instance, apply migrations; return the app URL."""
    from ingestion_pipeline.core.db import resolve_dagster_storage_url, resolve_database_url
    from ingestion_pipeline.core.migrations import ensure_schema

    os.environ.setdefault("DAGSTER_HOME", str(project_root()))
    url = resolve_database_url()
    resolve_dagster_storage_url()
    ensure_schema(url)
    return url


def _print_json(obj) -> None:
    print(json.dumps(obj, default=_json_default, ensure_ascii=False))


def _json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [min(60, max(len(c), *(len(row[i]) for row in cells))) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)))


def _print_rows(rows: list[dict], as_json: bool, columns: list[str]) -> None:
    """One JSON object per line with --json, else an aligned table of ``columns``."""
    if as_json:
        for row in rows:
            _print_json(row)
    else:
        _table(rows, columns)


def _pipeline(url: str):
    from ingestion_pipeline.defs.resources import DocumentPipelineResource

    return DocumentPipelineResource().pipeline(url)


# -- commands -------------------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.intake import REJECTED, submit_upload

    url = _bootstrap()
    pipeline = _pipeline(url)
    rejected = 0
    for name in args.files:
        result = submit_upload(
            url, pipeline.store, tenant_id=args.tenant, path=Path(name), fingerprint=pipeline.fingerprint,
            max_bytes=pipeline.settings.upload.max_bytes, title=args.title,
        )
        rejected += result.status == REJECTED
        _print_json(result.as_dict())
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
            counts: dict[str, int] = {}
            for o in report:
                counts[o.status] = counts.get(o.status, 0) + 1
            summary = {"partition_key": key, "dagster_run_id": result.run_id, "run_success": result.success,
                       "files": len(report), **counts}
            summaries.append(summary)
            _print_json({"batch": summary, "files": [
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
        _print_json({"metric_upload": {**summary, "total_rows": upload["total_rows"],
                                       "valid_rows": upload["valid_rows"], "invalid_rows": upload["invalid_rows"],
                                       "promoted_rows": upload["promoted_rows"], "error": upload["error"]}})
        # A failed upload is an answer, not a crash of `process`: it is reported, with its reason.
        summaries.append({**summary, "run_success": True})
    return summaries


def cmd_process(args: argparse.Namespace) -> int:
    url = _bootstrap()
    summaries = process_queued(url)
    if not summaries:
        print("nothing queued")
    return 0 if all(s["run_success"] for s in summaries) else 1


def cmd_ingest(args: argparse.Namespace) -> int:
    submitted = cmd_submit(args)
    processed = cmd_process(args)
    return submitted or processed


def cmd_runs(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core import ledger
    from ingestion_pipeline.core.db import connect

    url = _bootstrap()
    with connect(url) as conn:
        if args.runs_command == "show":
            row = ledger.get_run(conn, args.run_id)
            if row is None:
                print(f"no ledger row {args.run_id}", file=sys.stderr)
                return 1
            _print_json(row)
            return 0
        rows = ledger.list_runs(conn, tenant_id=args.tenant, status=args.status, limit=args.limit)
    if args.json:
        for r in rows:
            _print_json(r)
        return 0
    for r in rows:
        r["file"] = (r["config"] or {}).get("filename")
        r["chunks"] = (r["stats"] or {}).get("chunks")
        r["created"] = r["created_at"].strftime("%Y-%m-%d %H:%M:%S")
    _table(rows, ["run_id", "tenant_id", "status", "file", "chunks", "partition_key", "created", "error"])
    return 0


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents.listing import list_documents

    url = _bootstrap()
    with connect(url) as conn:
        rows = list_documents(conn, args.tenant, include_inactive=args.all)
    _print_rows(rows, args.json, ["doc_id", "title", "filename", "version_number", "versions", "page_count",
                                  "chunk_count", "token_count"])
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents.search import hybrid_search

    url = _bootstrap()
    pipeline = _pipeline(url)
    vector = pipeline.embedder.embed([args.query])[0]
    with connect(url) as conn:
        hits = hybrid_search(conn, tenant_id=args.tenant, query=args.query, query_vector=vector, k=args.k)
    if args.json:
        for h in hits:
            _print_json(h.as_dict())
        return 0
    if not hits:
        print("no results")
    for rank, h in enumerate(hits, start=1):
        snippet = " ".join(h.text.split())[:300]
        print(f"{rank}. [{h.score:.4f}] {h.citation()}\n   {snippet}\n")
    return 0


def cmd_source(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.sources import registry as sources

    url = _bootstrap()
    with connect(url, autocommit=True) as conn:
        if args.source_command == "add":
            source = sources.add_source(conn, args.uri, tenant_id=args.tenant, name=args.name,
                                        endpoint_url=args.endpoint_url, kind=args.kind, platform=args.platform)
            _print_json({"added": source.name, "uri": source.uri, "tenant_id": source.tenant_id, "kind": source.kind,
                         "endpoint_url": source.endpoint_url,
                         **({"platform": source.platform} if source.platform else {})})
        elif args.source_command == "list":
            rows = conn.execute(
                """SELECT s.name, s.tenant_id, s.kind, 's3://' || s.bucket || '/' || s.prefix AS uri, s.endpoint_url,
                          s.paused, s.pass_number - 1 AS passes_completed, s.last_pass_completed_at,
                          count(o.key) FILTER (WHERE o.status = 'active') AS active_objects,
                          count(o.key) FILTER (WHERE o.status = 'queued') AS queued_objects,
                          count(o.key) FILTER (WHERE o.status = 'skipped') AS skipped_objects,
                          count(o.key) FILTER (WHERE o.status = 'failed') AS failed_objects,
                          count(o.key) FILTER (WHERE o.status = 'deleted') AS deleted_objects
                     FROM ingestion_sources s LEFT JOIN source_objects o ON o.source_id = s.source_id
                    WHERE s.removed_at IS NULL GROUP BY s.source_id ORDER BY s.name"""
            ).fetchall()
            _print_rows(rows, args.json, ["name", "tenant_id", "kind", "uri", "paused", "active_objects",
                                          "queued_objects", "skipped_objects", "failed_objects", "deleted_objects"])
        elif args.source_command in ("pause", "resume"):
            source = sources.set_paused(conn, args.name, args.source_command == "pause")
            _print_json({"source": source.name, "paused": source.paused})
        elif args.source_command == "remove":
            sources.remove_source(conn, args.name)
            _print_json({"removed": args.name, "note": "documents already ingested stay as they are"})
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    """One full listing pass of each (or the named) active source now; --wait also processes the batches."""
    from dagster_aws.s3 import S3Resource

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource
    from ingestion_pipeline.defs.sources.s3_sensor import sync_active_sources
    from ingestion_pipeline.sources import registry as sources

    url = _bootstrap()
    if args.name:
        with connect(url, autocommit=True) as conn:
            source = sources.get_source(conn, args.name)
        if source.paused:
            raise ValueError(f"source {args.name!r} is paused; resume it first")
    reports = sync_active_sources(PostgresResource(database_url=url), DocumentPipelineResource(), S3Resource(),
                                  names=[args.name] if args.name else None, max_pages=None)
    for report in reports:
        _print_json({"sync": report.as_dict()})
    if not reports:
        print("no active sources")
    if args.wait:
        summaries = process_queued(url)
        return 0 if all(s["run_success"] for s in summaries) else 1
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.core.upload_store import LocalUploadStore
    from ingestion_pipeline.metrics import uploads

    url = _bootstrap()
    settings = load_settings().metrics
    if args.metrics_command == "submit":
        path = Path(args.file)
        if not path.is_file():
            raise ValueError(f"not a readable file: {path}")
        if path.stat().st_size > settings.max_bytes:
            _print_json({"status": "rejected", "filename": path.name,
                         "reason": f"file is {path.stat().st_size:,} bytes, over the {settings.max_bytes:,} limit"})
            return 1
        with path.open("rb") as stream:
            result = uploads.submit_metric_file(
                url, LocalUploadStore(settings.upload_dir), workspace_id=args.workspace, platform=args.platform,
                filename=path.name, stream=stream, max_bytes=settings.max_bytes, client_id=args.client,
                force_partial=args.force_partial,
                valid_threshold=args.threshold if args.threshold is not None else settings.valid_threshold,
            )
        _print_json(result.as_dict())
        return 1 if result.status == "rejected" else 0
    with connect(url) as conn:
        if args.metrics_command == "uploads":
            rows = uploads.list_uploads(conn, workspace_id=args.workspace)
            _print_rows(rows, args.json, ["upload_id", "workspace_id", "platform", "filename", "status",
                                          "total_rows", "valid_rows", "invalid_rows", "promoted_rows", "error"])
        elif args.metrics_command == "errors":
            if uploads.get_upload(conn, args.upload_id) is None:
                print(f"no metric upload {args.upload_id}", file=sys.stderr)
                return 1
            rows = uploads.upload_errors(conn, args.upload_id)
            if args.json:
                for r in rows:
                    _print_json(r)
            else:
                for r in rows:
                    reasons = "; ".join(f"{e['field']}: {e['error']}" for e in r["validation_errors"])
                    print(f"row {r['row_index']} (line {r['line_number']}, {r['validation_status']}): {reasons}")
                if not rows:
                    print("(no invalid rows)")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.metrics.uploads import list_events

    url = _bootstrap()
    with connect(url) as conn:
        rows = list_events(conn, workspace_id=args.workspace)
    if args.json:
        for r in rows:
            _print_json(r)
        return 0
    for r in rows:
        r["promoted_rows"] = r["payload"].get("promoted_rows")
        r["dates"] = " .. ".join(d or "" for d in r["payload"].get("date_range", []))
    _table(rows, ["event_id", "upload_id", "workspace_id", "event_type", "promoted_rows", "dates", "created_at"])
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    _bootstrap()
    root = project_root()
    dagster = Path(sys.executable).parent / "dagster"
    argv = [str(dagster), "dev", "-w", str(root / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(args.port)]
    os.chdir(root)
    os.execv(argv[0], argv)
    return 0  # not reached


def cmd_db(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

    if args.db_command == "url":
        print(_bootstrap())
    elif args.db_command == "stop":
        print("stopped" if stop_embedded_postgres() else "not running")
    elif args.db_command == "migrate":
        from ingestion_pipeline.core.db import resolve_database_url
        from ingestion_pipeline.core.migrations import apply_migrations

        applied = apply_migrations(resolve_database_url())
        print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingestion-pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

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

    p = sub.add_parser("runs", help="the run ledger")
    p.add_argument("--tenant")
    p.add_argument("--status", choices=["queued", "running", "succeeded", "failed"])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true")
    runs_sub = p.add_subparsers(dest="runs_command")
    show = runs_sub.add_parser("show", help="one ledger row in full")
    show.add_argument("run_id", type=int)
    p.set_defaults(func=cmd_runs)

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

    p = sub.add_parser("source", help="S3 sources kept in sync by s3_sensor")
    source_sub = p.add_subparsers(dest="source_command", required=True)
    add = source_sub.add_parser("add", help="add s3://bucket/prefix/ for a tenant")
    add.add_argument("uri")
    add.add_argument("--tenant", required=True)
    add.add_argument("--name")
    add.add_argument("--endpoint-url", help="an S3-compatible endpoint (default: the AWS environment)")
    add.add_argument("--kind", choices=["documents", "metrics"], default="documents",
                     help="metrics: CSV/JSON objects become metric uploads (workspace = --tenant)")
    add.add_argument("--platform", choices=["meta", "google", "tiktok"], help="for --kind metrics")
    lst = source_sub.add_parser("list")
    lst.add_argument("--json", action="store_true")
    for verb in ("pause", "resume", "remove"):
        source_sub.add_parser(verb).add_argument("name")
    p.set_defaults(func=cmd_source)

    p = sub.add_parser("sync", help="one sync of the active S3 sources now, without the daemon")
    p.add_argument("name", nargs="?")
    p.add_argument("--wait", action="store_true", help="also process the batches it queued, and wait")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("metrics", help="ad-platform metric exports")
    metrics_sub = p.add_subparsers(dest="metrics_command", required=True)
    msubmit = metrics_sub.add_parser("submit", help="queue a CSV/JSON export")
    msubmit.add_argument("file")
    msubmit.add_argument("--workspace", required=True)
    msubmit.add_argument("--platform", required=True, choices=["meta", "google", "tiktok"])
    msubmit.add_argument("--client")
    msubmit.add_argument("--force-partial", action="store_true", help="promote the valid rows below the threshold")
    msubmit.add_argument("--threshold", type=float, help="valid-row ratio required (default 0.9)")
    muploads = metrics_sub.add_parser("uploads", help="status, counts, errors")
    muploads.add_argument("--workspace")
    muploads.add_argument("--json", action="store_true")
    merrors = metrics_sub.add_parser("errors", help="the invalid rows of an upload and why")
    merrors.add_argument("upload_id", type=int)
    merrors.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("events", help="completion events (one per promoted metric upload)")
    p.add_argument("--workspace")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("dev", help="Dagster UI + daemon with sensors on (127.0.0.1)")
    p.add_argument("--port", type=int, default=3000)
    p.set_defaults(func=cmd_dev)

    p = sub.add_parser("db", help="the application database")
    p.add_argument("db_command", choices=["url", "stop", "migrate"])
    p.set_defaults(func=cmd_db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("ingestion_pipeline.ledger").setLevel(logging.INFO)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:  # bad input: say what is wrong, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
