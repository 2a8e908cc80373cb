"""The ledger: `files` (one row per file per submission; `runs` is its deprecated name) and what an operator
does with the work: `retry`, `cancel`, `pause`, `resume`."""

from __future__ import annotations

import argparse
import getpass
import re
import sys

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_table
from ingestion_pipeline.core import ledger, tenants
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS
from ingestion_pipeline.documents import file_ledger, units


def parse_duration(text: str) -> float:
    """'90s', '15m', '1h', '2d' -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text or "")
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30m, 1h, 2d)")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def _actor(args: argparse.Namespace) -> str:
    return args.by or getpass.getuser()


# -- files, files show ----------------------------------------------------------------------------------
def _with_file_id(row: dict) -> dict:
    """A ledger row as the CLI prints it: ``file_id`` first; ``run_id`` (its old name) kept in JSON for
    scripts written before the word changed (deprecated, see docs/cli.md)."""
    return {"file_id": row["file_id"], "run_id": row["file_id"], **row}


def _print_file(records: list[dict]) -> None:
    row = records[0]
    for name, value in row.items():
        if name not in ("history", "run_id", "units", "chunk_parts"):
            print(f"{name:>22}: {'' if value is None else value}")
    if row.get("units"):
        u = row["units"]
        rate = "?" if u["pages_per_s"] is None else f"{u['pages_per_s']:.2f}"
        eta = "?" if u["eta_s"] is None else f"{u['eta_s']:.0f} s"
        print(f"{'units':>22}: {u['units_done']}/{u['units_total']} read, pages {u['pages_done']}/{u['pages_total']} "
              f"({rate} pages/s), ETA {eta}")
        for r in u.get("reading", []):
            print(f"{'':>22}  unit {r['unit']} (pages {r['first_page']}-{r['last_page']}) read by {r['reader']}, "
                  f"lease renewed {r['beat_seconds_ago']:.0f} s ago")
    if row.get("chunk_parts"):
        p = row["chunk_parts"]
        print(f"{'chunk parts':>22}: {p['parts_done']}/{p['parts_total']} chunked, sections {p['sections_done']}/"
              f"{p['sections_total']}" + (f" (by {', '.join(p['chunked_by'])})" if p["chunked_by"] else ""))
    print("\nattempts:")
    print_table([{**h, "at": h["at"].strftime("%Y-%m-%d %H:%M:%S")} for h in row["history"]],
                ["at", "attempt", "event", "status", "error_code", "message", "actor"])


def _print_files(records: list[dict]) -> None:
    rows = [{**r, "file": (r["config"] or {}).get("filename"), "chunks": (r["stats"] or {}).get("chunks"),
             "created": r["created_at"].strftime("%Y-%m-%d %H:%M:%S")} for r in records]
    print_table(rows, ["file_id", "tenant_id", "status", "attempts", "file", "chunks", "partition_key", "created",
                       "error_code", "error"])


def cmd_files(args: argparse.Namespace) -> int:
    if args.command == "runs":
        print("`ingestion-pipeline runs` is now `ingestion-pipeline files` (a ledger row is a file; a run is "
              "Dagster's); `runs` still works and will be removed in a later release.", file=sys.stderr)
    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.files_command == "show":
            row = file_ledger.get_file(conn, args.file_id, tenant_id=None)
            if row is None:
                print(f"no file {args.file_id} in the ledger", file=sys.stderr)
                return 1
            row = _with_file_id(row)
            # a big PDF being read in units: how far it is (documents/units.py)
            row["units"] = units.progress(conn, args.file_id) if row["status"] == "running" else None
            if row["status"] == "running":  # a big document chunked in parts on Celery workers
                from ingestion_pipeline.documents.steps import chunk_parts

                row["chunk_parts"] = chunk_parts.progress(conn, args.file_id)
            row["history"] = ledger.history(conn, DOCUMENT_FILES, args.file_id)
            emit(args, [row], _print_file)
            return 0
        since = parse_duration(args.since) if args.since else None
        rows = file_ledger.list_files(conn, tenant_id=args.tenant, status=args.status, limit=args.limit,
                                      since_seconds=since)
    emit(args, [_with_file_id(r) for r in rows], _print_files)
    return 0


# -- retry, cancel -------------------------------------------------------------------------------------
def _print_requeued(records: list[dict]) -> None:
    for r in records:
        print(f"{r['kind']} {r['id']}: {r['outcome']}")
    if not records:
        print("nothing to retry")


def cmd_retry(args: argparse.Namespace) -> int:
    """Replay failed, dead-lettered or canceled work as a new attempt (the sensors or `process` run it)."""
    status = "dead_letter" if args.dead_letter else "failed" if args.failed else None
    if status is None and not (args.file_ids or args.upload):
        raise ValueError("name FILE_ID(s) or --upload ID(s), or pick --dead-letter or --failed")
    since = parse_duration(args.since) if args.since else None
    records: list[dict] = []
    with bootstrap() as ctx, ctx.db.transaction() as conn:
        for t, ids in ((DOCUMENT_FILES, list(args.file_ids or [])), (METRIC_UPLOADS, list(args.upload or []))):
            if status is not None:
                ids += ledger.select_replayable(conn, t, status=status, tenant_id=args.tenant, since_seconds=since)
            if not ids:
                continue
            before = ledger.states(conn, t, ids)
            requeued = ledger.requeue(conn, t, ids, actor=_actor(args))
            if t is DOCUMENT_FILES:
                file_ledger.report(conn, requeued)
            done = {r[t.key] for r in requeued}
            for item_id in dict.fromkeys(ids):
                outcome = "queued" if item_id in done else (
                    f"not retried: it is {before[item_id]['status']}" if item_id in before else "not found")
                records.append({"kind": t.kind, "id": item_id, "outcome": outcome})
    emit(args, records, _print_requeued)
    return 0 if all(r["outcome"] == "queued" for r in records) else 1


def _print_canceled(records: list[dict]) -> None:
    r = records[0]
    print(f"canceled: {len(r['canceled'])} ({', '.join(map(str, r['canceled'])) or 'none'})")
    for item in r["not_cancelable"]:
        print(f"not canceled: {item['id']} is already {item['status']}")
    if r["terminated_runs"]:
        print(f"terminated Dagster run(s): {', '.join(r['terminated_runs'])}")


def cmd_cancel(args: argparse.Namespace) -> int:
    import dagster as dg

    from ingestion_pipeline.defs.ledger import operations

    with bootstrap() as ctx:
        instance = dg.DagsterInstance.get()
        if args.batch:
            report, key = operations.cancel_batch(instance, ctx.db, args.batch, _actor(args)), "file_id"
        elif args.upload:
            report, key = operations.cancel_upload(instance, ctx.db, args.upload, _actor(args)), "upload_id"
        elif args.file_ids:
            report, key = operations.cancel_files(instance, ctx.db, args.file_ids, _actor(args)), "file_id"
        else:
            raise ValueError("name FILE_ID(s), --batch KEY or --upload ID")
    record = {"canceled": [r[key] for r in report.canceled], "not_cancelable": report.not_cancelable,
              "terminated_runs": report.terminated_runs}
    emit(args, [record], _print_canceled)
    return 0 if report.canceled else 1


# -- pause, resume -------------------------------------------------------------------------------------
def cmd_pause(args: argparse.Namespace) -> int:
    from ingestion_pipeline.sources import registry

    paused = args.command == "pause"
    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.tenant:
            row = tenants.set_paused(conn, args.tenant, paused)
            record = {"tenant": row["tenant_id"], "paused": row["paused"]}
        elif args.source:
            source = registry.set_paused(conn, args.source, paused)
            record = {"source": source.name, "paused": source.paused}
        else:
            raise ValueError("name --tenant T or --source NAME")
    what = f"tenant {record['tenant']}" if "tenant" in record else f"source {record['source']}"
    note = ("new work is not launched; files in flight go back to the queue at their next step"
            if paused else "queued work is launched again and continues from its staged data")
    emit(args, [record], lambda r: print(f"{what} {'paused' if paused else 'resumed'}: {note}"))
    return 0


def register(sub) -> None:
    """Add `files` (and its old name `runs`), `retry`, `cancel`, `pause` and `resume` to the top-level subparsers."""
    for name, text in (("files", "the ledger's files: one row per file per submission, its status and attempts"),
                       ("runs", "deprecated name of `files`")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--tenant")
        p.add_argument("--status", choices=file_ledger.STATUSES)
        p.add_argument("--since", help="only files updated within this long, e.g. 1h")
        p.add_argument("--limit", type=int, default=100)
        add_json_flag(p)
        files_sub = p.add_subparsers(dest="files_command")
        show = files_sub.add_parser("show", help="one file in full, with the history of its attempts")
        show.add_argument("file_id", type=int)
        add_json_flag(show)
        p.set_defaults(func=cmd_files)

    p = sub.add_parser("retry", help="replay failed, dead-lettered or canceled work as a new attempt")
    p.add_argument("file_ids", nargs="*", type=int, metavar="FILE_ID")
    p.add_argument("--upload", type=int, nargs="+", metavar="UPLOAD_ID", help="metric uploads to replay")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dead-letter", action="store_true", help="every dead-lettered file and upload")
    which.add_argument("--failed", action="store_true", help="every failed file and upload")
    p.add_argument("--tenant", help="with --dead-letter / --failed: only this tenant's (workspace's)")
    p.add_argument("--since", help="with --dead-letter / --failed: only those that ended within this long, e.g. 1h")
    p.add_argument("--by", help="who asks (default: the login name)")
    add_json_flag(p)
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("cancel", help="cancel work: its staged data is removed, nothing of it is promoted")
    p.add_argument("file_ids", nargs="*", type=int, metavar="FILE_ID")
    p.add_argument("--batch", metavar="KEY", help="every unfinished file of a batch (partition key)")
    p.add_argument("--upload", type=int, metavar="UPLOAD_ID", help="a metric upload")
    p.add_argument("--by", help="who cancels (default: the login name)")
    add_json_flag(p)
    p.set_defaults(func=cmd_cancel)

    for verb, text in (("pause", "stop launching a tenant's or a source's work; in-flight files are parked"),
                       ("resume", "launch a paused tenant's or source's work again")):
        p = sub.add_parser(verb, help=text)
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("--tenant")
        target.add_argument("--source", metavar="NAME")
        add_json_flag(p)
        p.set_defaults(func=cmd_pause)
