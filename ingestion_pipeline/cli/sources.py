"""S3 source commands: `source add|list|pause|resume|remove`, `sync`, and the tenants' S3 locations:
`tenant bind|unbind|locations|audit` (sources/locations.py)."""

from __future__ import annotations

import argparse

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.documents import process_queued
from ingestion_pipeline.cli.output import add_json_flag, emit, print_rows
from ingestion_pipeline.metrics.formats import PLATFORMS


def cmd_source(args: argparse.Namespace) -> int:
    from ingestion_pipeline.sources import registry as sources

    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.source_command == "add":
            source = sources.add_source(conn, args.uri, tenant_id=args.tenant, name=args.name,
                                        endpoint_url=args.endpoint_url, kind=args.kind, platform=args.platform)
            record = {"added": source.name, "uri": source.uri, "tenant_id": source.tenant_id, "kind": source.kind,
                      "endpoint_url": source.endpoint_url, **({"platform": source.platform} if source.platform else {})}
            emit(args, [record], lambda r: print(f"added source {source.name}: {source.uri} for tenant "
                                                  f"{source.tenant_id} ({source.kind})"))
        elif args.source_command == "list":
            rows = sources.source_status(conn)
            print_rows(args, rows, ["name", "tenant_id", "kind", "uri", "paused", "active_objects",
                                          "queued_objects", "skipped_objects", "failed_objects", "deleted_objects"])
        elif args.source_command in ("pause", "resume"):
            source = sources.set_paused(conn, args.name, args.source_command == "pause")
            emit(args, [{"source": source.name, "paused": source.paused}],
                 lambda r: print(f"source {source.name} is {'paused' if source.paused else 'active'}"))
        elif args.source_command == "remove":
            sources.remove_source(conn, args.name)
            emit(args, [{"removed": args.name, "note": "documents already ingested stay as they are"}],
                 lambda r: print(f"removed source {args.name}; documents already ingested stay as they are"))
    return 0


def _print_sync(records: list[dict]) -> None:
    if not records:
        print("no active sources")
    for record in records:
        r = record["sync"]
        state = "busy (another sync holds the source)" if r["busy"] else (
            "pass completed" if r["pass_completed"] else "pass continues on the next sync")
        print(f"{r['source']}: listed {r['listed']}, new {r['new']}, changed {r['changed']}, unchanged "
              f"{r['unchanged']}, skipped {r['skipped']}, deleted {r['deleted']} ({state})")


def cmd_sync(args: argparse.Namespace) -> int:
    """One full listing pass of each (or the named) active source now; --wait also processes the batches."""
    from ingestion_pipeline.defs.resources import S3Clients
    from ingestion_pipeline.defs.s3_resource import S3Resource
    from ingestion_pipeline.sources import registry as sources
    from ingestion_pipeline.sources.sync_pass import sync_sources

    with bootstrap() as ctx:
        if args.name:
            with ctx.db.connection() as conn:
                source = sources.get_source(conn, args.name)
            if source.paused:
                raise ValueError(f"source {args.name!r} is paused; resume it first")
        reports = sync_sources(ctx.db, ctx.settings, S3Clients(S3Resource()), ctx.metric_store,
                                      names=[args.name] if args.name else None, max_pages=None)
        emit(args, [{"sync": r.as_dict()} for r in reports], _print_sync)
        if args.wait:
            summaries = process_queued(ctx, args)
            return 0 if all(s["run_success"] for s in summaries) else 1
    return 0


def cmd_tenant(args: argparse.Namespace) -> int:
    """The operator's binding of S3 locations to tenants: what a tenant's requests may name."""
    import getpass

    from ingestion_pipeline.sources import locations
    from ingestion_pipeline.sources.registry import parse_s3_uri

    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.tenant_command in ("bind", "unbind"):
            bucket, prefix = parse_s3_uri(args.uri)
            where = locations.location(bucket, prefix, args.endpoint_url)
            by = f"cli:{getpass.getuser()}"
            if args.tenant_command == "bind":
                changed = locations.bind(conn, args.tenant, where, by=by)
                said = "bound" if changed else "already bound"
            else:
                changed = locations.unbind(conn, args.tenant, where, by=by)
                said = "unbound (its sources stop syncing)" if changed else "was not bound"
            emit(args, [{"tenant": args.tenant, "location": where.uri, "changed": changed}],
                 lambda r: print(f"{where.uri} {said} for tenant {args.tenant}"))
        elif args.tenant_command == "locations":
            print_rows(args, locations.bindings(conn, args.tenant),
                       ["tenant_id", "endpoint_url", "bucket", "prefix", "bound_by", "bound_at"])
        else:
            print_rows(args, locations.audit_log(conn, args.tenant, args.limit),
                       ["at", "tenant_id", "action", "entrance", "location", "reason"])
    return 0


def register(sub) -> None:
    """Add `source` and `sync` to the top-level subparsers."""
    p = sub.add_parser("source", help="S3 sources kept in sync by the intake service")
    source_sub = p.add_subparsers(dest="source_command", required=True)
    add = source_sub.add_parser("add", help="add s3://bucket/prefix/ for a tenant")
    add.add_argument("uri")
    add.add_argument("--tenant", required=True)
    add.add_argument("--name")
    add.add_argument("--endpoint-url", help="an S3-compatible endpoint (default: the AWS environment)")
    add.add_argument("--kind", choices=["documents", "metrics"], default="documents",
                     help="metrics: CSV/JSON objects become metric uploads (workspace = --tenant)")
    add.add_argument("--platform", choices=PLATFORMS, help="for --kind metrics")
    add_json_flag(add)
    add_json_flag(source_sub.add_parser("list"))
    for verb in ("pause", "resume", "remove"):
        action = source_sub.add_parser(verb)
        action.add_argument("name")
        add_json_flag(action)
    p.set_defaults(func=cmd_source)

    p = sub.add_parser("tenant", help="the S3 locations each tenant's requests may name (operator only)")
    tenant_sub = p.add_subparsers(dest="tenant_command", required=True)
    for verb, what in (("bind", "bind s3://bucket/prefix/ to a tenant (made if new)"),
                       ("unbind", "remove a binding; sources inside it stop syncing")):
        action = tenant_sub.add_parser(verb, help=what)
        action.add_argument("tenant")
        action.add_argument("uri")
        action.add_argument("--endpoint-url", help="an S3-compatible endpoint (default: the AWS environment)")
        add_json_flag(action)
    for verb, what in (("locations", "the bindings"), ("audit", "bindings made and removed, requests refused")):
        action = tenant_sub.add_parser(verb, help=what)
        action.add_argument("tenant", nargs="?")
        if verb == "audit":
            action.add_argument("--limit", type=int, default=100)
        add_json_flag(action)
    p.set_defaults(func=cmd_tenant)

    p = sub.add_parser("sync", help="one sync of the active S3 sources now, without the daemon")
    p.add_argument("name", nargs="?")
    p.add_argument("--wait", action="store_true", help="also process the batches it queued, and wait")
    add_json_flag(p)
    p.set_defaults(func=cmd_sync)
