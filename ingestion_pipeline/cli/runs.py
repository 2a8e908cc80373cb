"""`runs`: the run runs."""

from __future__ import annotations

import argparse
import sys

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import print_json, print_table


def cmd_runs(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents import runs

    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.runs_command == "show":
            row = runs.get_run(conn, args.run_id)
            if row is None:
                print(f"no ledger row {args.run_id}", file=sys.stderr)
                return 1
            print_json(row)
            return 0
        rows = runs.list_runs(conn, tenant_id=args.tenant, status=args.status, limit=args.limit)
    if args.json:
        for r in rows:
            print_json(r)
        return 0
    for r in rows:
        r["file"] = (r["config"] or {}).get("filename")
        r["chunks"] = (r["stats"] or {}).get("chunks")
        r["created"] = r["created_at"].strftime("%Y-%m-%d %H:%M:%S")
    print_table(rows, ["run_id", "tenant_id", "status", "file", "chunks", "partition_key", "created", "error"])
    return 0


def register(sub) -> None:
    """Add `runs` to the top-level subparsers."""
    p = sub.add_parser("runs", help="the run ledger")
    p.add_argument("--tenant")
    p.add_argument("--status", choices=["queued", "running", "succeeded", "failed"])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true")
    runs_sub = p.add_subparsers(dest="runs_command")
    show = runs_sub.add_parser("show", help="one ledger row in full")
    show.add_argument("run_id", type=int)
    p.set_defaults(func=cmd_runs)
