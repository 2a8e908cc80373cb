"""Metric export commands: `metrics submit|uploads|errors` and `events`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import print_json, print_rows, print_table
from ingestion_pipeline.metrics.formats import PLATFORMS


def cmd_metrics(args: argparse.Namespace) -> int:
    from ingestion_pipeline.metrics import uploads

    with bootstrap() as ctx:
        return _metrics(ctx, args, uploads)


def _metrics(ctx, args: argparse.Namespace, uploads) -> int:
    settings = ctx.settings.metrics
    if args.metrics_command == "submit":
        path = Path(args.file)
        if not path.is_file():
            raise ValueError(f"not a readable file: {path}")
        if path.stat().st_size > settings.max_bytes:
            print_json({"status": "rejected", "filename": path.name,
                         "reason": f"file is {path.stat().st_size:,} bytes, over the {settings.max_bytes:,} limit"})
            return 1
        with path.open("rb") as stream:
            result = uploads.submit_metric_file(
                ctx.db, ctx.metric_store, workspace_id=args.workspace, platform=args.platform,
                filename=path.name, stream=stream, max_bytes=settings.max_bytes, client_id=args.client,
                force_partial=args.force_partial,
                valid_threshold=args.threshold if args.threshold is not None else settings.valid_threshold,
            )
        print_json(result.as_dict())
        return 1 if result.status == "rejected" else 0
    with ctx.db.connection() as conn:
        if args.metrics_command == "uploads":
            rows = uploads.list_uploads(conn, workspace_id=args.workspace)
            print_rows(rows, args.json, ["upload_id", "workspace_id", "platform", "filename", "status",
                                          "total_rows", "valid_rows", "invalid_rows", "promoted_rows", "error"])
        elif args.metrics_command == "errors":
            if uploads.get_upload(conn, args.upload_id) is None:
                print(f"no metric upload {args.upload_id}", file=sys.stderr)
                return 1
            rows = uploads.upload_errors(conn, args.upload_id)
            if args.json:
                for r in rows:
                    print_json(r)
            else:
                for r in rows:
                    reasons = "; ".join(f"{e['field']}: {e['error']}" for e in r["validation_errors"])
                    print(f"row {r['row_index']} (line {r['line_number']}, {r['validation_status']}): {reasons}")
                if not rows:
                    print("(no invalid rows)")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from ingestion_pipeline.metrics.uploads import list_events

    with bootstrap() as ctx, ctx.db.connection() as conn:
        rows = list_events(conn, workspace_id=args.workspace)
    if args.json:
        for r in rows:
            print_json(r)
        return 0
    for r in rows:
        r["promoted_rows"] = r["payload"].get("promoted_rows")
        r["dates"] = " .. ".join(d or "" for d in r["payload"].get("date_range", []))
    print_table(rows, ["event_id", "upload_id", "workspace_id", "event_type", "promoted_rows", "dates", "created_at"])
    return 0


def register(sub) -> None:
    """Add `metrics` and `events` to the top-level subparsers."""
    p = sub.add_parser("metrics", help="ad-platform metric exports")
    metrics_sub = p.add_subparsers(dest="metrics_command", required=True)
    msubmit = metrics_sub.add_parser("submit", help="queue a CSV/JSON export")
    msubmit.add_argument("file")
    msubmit.add_argument("--workspace", required=True)
    msubmit.add_argument("--platform", required=True, choices=PLATFORMS)
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
