"""`db url|stop|migrate`: the application database."""

from __future__ import annotations

import argparse

from ingestion_pipeline.cli.bootstrap import bootstrap


def cmd_db(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

    if args.db_command == "url":
        with bootstrap() as ctx:
            print(ctx.url)
    elif args.db_command == "stop":
        print("stopped" if stop_embedded_postgres() else "not running")
    elif args.db_command == "migrate":
        from ingestion_pipeline.core.db import resolve_database_url
        from ingestion_pipeline.core.migrations import apply_migrations

        applied = apply_migrations(resolve_database_url())
        print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return 0


def register(sub) -> None:
    """Add `db` to the top-level subparsers."""
    p = sub.add_parser("db", help="the application database")
    p.add_argument("db_command", choices=["url", "stop", "migrate"])
    p.set_defaults(func=cmd_db)
