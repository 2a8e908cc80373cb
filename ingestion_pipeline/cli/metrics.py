"""Metric export commands: `metrics submit|uploads|errors` and `events`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import Context, bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_rows, print_table
from ingestion_pipeline.core.upload_store import RefusedPath, open_submitted_file
from ingestion_pipeline.metrics import uploads
from ingestion_pipeline.metrics.formats import PLATFORMS


def _print_submitted(records: list[dict]) -> None:
    r = records[0]
    if r["status"] == "pending":
        detected = f", {r['platform']} detected from its columns ({r['layout']})" if r.get("layout") else ""
        print(f"upload {r['upload_id']}: pending (partition {r['partition_key']}, {r['size_bytes']:,} bytes"
              f"{detected})")
    else:
        print(f"{r['filename']}: {r['status']} ({r['reason']})")


def _print_errors(records: list[dict]) -> None:
    for r in records:
        reasons = "; ".join(f"{e['field']}: {e['error']}" for e in r["validation_errors"])
        print(f"row {r['row_index']} (line {r['line_number']}, {r['validation_status']}): {reasons}")
    if not records:
        print("(no invalid rows)")


def _submit(ctx: Context, args: argparse.Namespace) -> int:
    settings = ctx.settings.metrics
    path = Path(args.file)
    try:
        stream = open_submitted_file(path, follow_symlinks=args.follow_symlinks)
    except RefusedPath as exc:
        emit(args, [{"status": "rejected", "filename": path.name, "reason": str(exc)}], _print_submitted)
        return 1
    except OSError as exc:
        raise ValueError(f"not a readable file: {path}") from exc
    size = os.fstat(stream.fileno()).st_size
    if size > settings.max_bytes:
        stream.close()
        emit(args, [{"status": "rejected", "filename": path.name,
                     "reason": f"file is {size:,} bytes, over the {settings.max_bytes:,} limit"}], _print_submitted)
        return 1
    with stream:
        result = uploads.submit_metric_file(
            ctx.db, ctx.metric_store, workspace_id=args.workspace, platform=args.platform,
            filename=path.name, stream=stream, max_bytes=settings.max_bytes, client_id=args.client,
            force_partial=args.force_partial,
            valid_threshold=args.threshold if args.threshold is not None else settings.valid_threshold,
        )
    emit(args, [result.as_dict()], _print_submitted)
    return 1 if result.status == "rejected" else 0


def cmd_metrics(args: argparse.Namespace) -> int:
    with bootstrap() as ctx:
        if args.metrics_command == "submit":
            return _submit(ctx, args)
        with ctx.db.connection() as conn:
            if args.metrics_command == "uploads":
                rows = uploads.list_uploads(conn, workspace_id=args.workspace)
                print_rows(args, rows, ["upload_id", "workspace_id", "platform", "layout", "filename", "status",
                                        "total_rows", "valid_rows", "invalid_rows", "skipped_rows", "promoted_rows",
                                        "error"])
            elif args.metrics_command == "errors":
                if uploads.get_upload(conn, args.upload_id, workspace_id=None) is None:
                    print(f"no metric upload {args.upload_id}", file=sys.stderr)
                    return 1
                emit(args, uploads.upload_errors(conn, args.upload_id, workspace_id=None), _print_errors)
    return 0


def _print_events(records: list[dict]) -> None:
    rows = [{**r, "promoted_rows": r["payload"].get("promoted_rows"),
             "dates": " .. ".join(d or "" for d in r["payload"].get("date_range", []))} for r in records]
    print_table(rows, ["event_id", "upload_id", "workspace_id", "event_type", "promoted_rows", "dates", "created_at"])


def cmd_events(args: argparse.Namespace) -> int:
    with bootstrap() as ctx, ctx.db.connection() as conn:
        rows = uploads.list_events(conn, workspace_id=args.workspace)
    emit(args, rows, _print_events)
    return 0


def register(sub) -> None:
    """Add `metrics` and `events` to the top-level subparsers."""
    p = sub.add_parser("metrics", help="ad-platform metric exports")
    metrics_sub = p.add_subparsers(dest="metrics_command", required=True)
    msubmit = metrics_sub.add_parser("submit", help="queue a CSV/JSON export")
    msubmit.add_argument("file")
    msubmit.add_argument("--workspace", required=True)
    msubmit.add_argument("--platform", choices=PLATFORMS,
                         help="default: detected from the file's columns (the layout it matched is shown)")
    msubmit.add_argument("--client")
    msubmit.add_argument("--force-partial", action="store_true", help="promote the valid rows below the threshold")
    msubmit.add_argument("--threshold", type=float, help="valid-row ratio required (default 0.9)")
    msubmit.add_argument("--follow-symlinks", action="store_true",
                         help="read what a symbolic link points to (refused by default)")
    add_json_flag(msubmit)
    muploads = metrics_sub.add_parser("uploads", help="status, counts, errors")
    muploads.add_argument("--workspace")
    add_json_flag(muploads)
    merrors = metrics_sub.add_parser("errors", help="the invalid rows of an upload and why")
    merrors.add_argument("upload_id", type=int)
    add_json_flag(merrors)
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("events", help="completion events (one per promoted metric upload)")
    p.add_argument("--workspace")
    add_json_flag(p)
    p.set_defaults(func=cmd_events)
