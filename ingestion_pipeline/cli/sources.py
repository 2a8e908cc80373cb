"""S3 source commands: `source add|list|pause|resume|remove` and `sync`."""

from __future__ import annotations

import argparse

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.documents import process_queued
from ingestion_pipeline.cli.output import print_json, print_rows
from ingestion_pipeline.metrics.formats import PLATFORMS


def cmd_source(args: argparse.Namespace) -> int:
    from ingestion_pipeline.sources import registry as sources

    with bootstrap() as ctx, ctx.db.connection() as conn:
        if args.source_command == "add":
            source = sources.add_source(conn, args.uri, tenant_id=args.tenant, name=args.name,
                                        endpoint_url=args.endpoint_url, kind=args.kind, platform=args.platform)
            print_json({"added": source.name, "uri": source.uri, "tenant_id": source.tenant_id, "kind": source.kind,
                         "endpoint_url": source.endpoint_url,
                         **({"platform": source.platform} if source.platform else {})})
        elif args.source_command == "list":
            rows = sources.source_status(conn)
            print_rows(rows, args.json, ["name", "tenant_id", "kind", "uri", "paused", "active_objects",
                                          "queued_objects", "skipped_objects", "failed_objects", "deleted_objects"])
        elif args.source_command in ("pause", "resume"):
            source = sources.set_paused(conn, args.name, args.source_command == "pause")
            print_json({"source": source.name, "paused": source.paused})
        elif args.source_command == "remove":
            sources.remove_source(conn, args.name)
            print_json({"removed": args.name, "note": "documents already ingested stay as they are"})
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    """One full listing pass of each (or the named) active source now; --wait also processes the batches."""
    from dagster_aws.s3 import S3Resource

    from ingestion_pipeline.defs.resources import S3Clients
    from ingestion_pipeline.defs.sources.s3_sensor import sync_active_sources
    from ingestion_pipeline.sources import registry as sources

    with bootstrap() as ctx:
        if args.name:
            with ctx.db.connection() as conn:
                source = sources.get_source(conn, args.name)
            if source.paused:
                raise ValueError(f"source {args.name!r} is paused; resume it first")
        reports = sync_active_sources(ctx.db, ctx.settings, S3Clients(S3Resource()), ctx.metric_store,
                                      names=[args.name] if args.name else None, max_pages=None)
        for report in reports:
            print_json({"sync": report.as_dict()})
        if not reports:
            print("no active sources")
        if args.wait:
            summaries = process_queued(ctx)
            return 0 if all(s["run_success"] for s in summaries) else 1
    return 0


def register(sub) -> None:
    """Add `source` and `sync` to the top-level subparsers."""
    p = sub.add_parser("source", help="S3 sources kept in sync by s3_sensor")
    source_sub = p.add_subparsers(dest="source_command", required=True)
    add = source_sub.add_parser("add", help="add s3://bucket/prefix/ for a tenant")
    add.add_argument("uri")
    add.add_argument("--tenant", required=True)
    add.add_argument("--name")
    add.add_argument("--endpoint-url", help="an S3-compatible endpoint (default: the AWS environment)")
    add.add_argument("--kind", choices=["documents", "metrics"], default="documents",
                     help="metrics: CSV/JSON objects become metric uploads (workspace = --tenant)")
    add.add_argument("--platform", choices=PLATFORMS, help="for --kind metrics")
    lst = source_sub.add_parser("list")
    lst.add_argument("--json", action="store_true")
    for verb in ("pause", "resume", "remove"):
        source_sub.add_parser(verb).add_argument("name")
    p.set_defaults(func=cmd_source)

    p = sub.add_parser("sync", help="one sync of the active S3 sources now, without the daemon")
    p.add_argument("name", nargs="?")
    p.add_argument("--wait", action="store_true", help="also process the batches it queued, and wait")
    p.set_defaults(func=cmd_sync)
