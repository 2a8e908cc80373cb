"""`db url|check|stop|migrate`: the application database (and, for `check`, Dagster's storage)."""

from __future__ import annotations

import argparse

from ingestion_pipeline.cli.output import add_json_flag, emit


def cmd_db(args: argparse.Namespace) -> int:
    if args.db_command == "url":
        from ingestion_pipeline.cli.bootstrap import bootstrap
        from ingestion_pipeline.core.db import resolve_dagster_storage_url

        with bootstrap() as ctx:
            # --dagster: the URL of Dagster's own storage, for `export DAGSTER_PG_URL=...` before `dg`
            url = resolve_dagster_storage_url() if args.dagster else ctx.url
            emit(args, [{"url": url}], lambda r: print(url))
    elif args.db_command == "stop":
        from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

        stopped = stop_embedded_postgres()
        emit(args, [{"stopped": stopped}], lambda r: print("stopped" if stopped else "not running"))
    elif args.db_command == "check":  # exit 0, 3 (not there) or 4 (schema older than the code): e.g. an init container
        from ingestion_pipeline.cli.bootstrap import check_databases

        check_databases()
        emit(args, [{"ok": True}], lambda r: print("both databases answer; the schema is current"))
    elif args.db_command == "migrate":
        from ingestion_pipeline.core.db import Database, resolve_database_url
        from ingestion_pipeline.core.migrations import apply_migrations
        from ingestion_pipeline.documents import search, vector_index

        url = resolve_database_url(allow_embedded=True)
        applied = apply_migrations(url)
        # the large tenants' HNSW graphs an upgrade leaves to build (sql/052), built concurrently: searches and
        # promotions go on meanwhile
        with Database(url, max_size=1, name="migrate") as db:
            graphs = vector_index.ensure_graphs(db, search.EXACT_SEARCH_MAX_CHUNKS)
        emit(args, [{"applied": applied, "graphs_built": [list(g) for g in graphs.built],
                     "graphs_failed": [list(g) for g in graphs.failed]}],
             lambda r: print("applied: " + (", ".join(applied) if applied else "nothing (up to date)")
                             + (f"; HNSW graphs built for {len(graphs.built)} large tenant(s)" if graphs.built else "")
                             + (f"; {len(graphs.failed)} graph(s) not built (see the log; built again by the "
                                "next `db migrate`, the janitor or the tenant's next promotion)"
                                if graphs.failed else "")))
    return 0


def register(sub) -> None:
    """Add `db` to the top-level subparsers."""
    p = sub.add_parser("db", help="the application database")
    p.add_argument("db_command", choices=["url", "check", "stop", "migrate"])
    p.add_argument("--dagster", action="store_true",
                   help="with url: the URL of Dagster's own storage (for DAGSTER_PG_URL)")
    add_json_flag(p)
    p.set_defaults(func=cmd_db)
