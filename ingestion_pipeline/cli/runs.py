"""`runs`: the run ledger (one row per file per submission)."""

from __future__ import annotations

import argparse
import sys

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_table
from ingestion_pipeline.documents import runs


def _print_run(records: list[dict]) -> None:
    for name, value in records[0].items():
        print(f"{name:>16}: {'' if value is None else value}")


def _print_runs(records: list[dict]) -> None:
    rows = [{**r, "file": (r["config"] or {}).get("filename"), "chunks": (r["stats"] or {}).get("chunks"),
             "created": r["created_at"].strftime("%Y-%m-%d %H:%M:%S")} for r in records]
    print_table(rows, ["run_id", "tenant_id", "status", "file", "chunks", "partition_key", "created", "error"])


def cmd_runs(args: argparse.Namespace) -> int:
    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.runs_command == "show":
            row = runs.get_run(conn, args.run_id)
            if row is None:
                print(f"no ledger row {args.run_id}", file=sys.stderr)
                return 1
            emit(args, [row], _print_run)
            return 0
        rows = runs.list_runs(conn, tenant_id=args.tenant, status=args.status, limit=args.limit)
    emit(args, rows, _print_runs)
    return 0


def register(sub) -> None:
    """Add `runs` to the top-level subparsers."""
    p = sub.add_parser("runs", help="the run ledger")
    p.add_argument("--tenant")
    p.add_argument("--status", choices=["queued", "running", "succeeded", "failed"])
    p.add_argument("--limit", type=int, default=100)
    add_json_flag(p)
    runs_sub = p.add_subparsers(dest="runs_command")
    show = runs_sub.add_parser("show", help="one ledger row in full")
    show.add_argument("run_id", type=int)
    add_json_flag(show)
    p.set_defaults(func=cmd_runs)
