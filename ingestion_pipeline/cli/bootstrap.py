"""What every command does first: find the databases and the Dagster instance, apply the schema, and
hand the command one ``Context`` (database pool, settings, and the services of ``ingestion_pipeline.services``)."""

from __future__ import annotations

import os
from typing import Any

import psycopg

from ingestion_pipeline.core.db import Database, check_reachable, resolve_dagster_storage_url, resolve_database_url
from ingestion_pipeline.core.migrations import apply_migrations, check_schema
from ingestion_pipeline.core.settings import Settings, instance_home, load_settings
from ingestion_pipeline.services import Services


class Context(Services):
    """One command's view of the system: the services, and a database pool it closes when the command ends."""

    def __init__(self, url: str, settings: Settings, **services: Any) -> None:
        super().__init__(settings, database_url=url, **services)
        self.url = url
        self.db = Database(url)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *_exc) -> None:
        self.db.close()


def bootstrap() -> Context:
    """Resolve databases (the embedded server when DATABASE_URL is unset), point Dagster at the project's
    instance, and check the schema: the CLI migrates the embedded database it manages itself; another
    database must be migrated explicitly (`ingestion-pipeline db migrate`), so a command refuses to work on
    an older schema (``SchemaOutOfDate``, exit code 4)."""
    os.environ.setdefault("DAGSTER_HOME", str(instance_home()))
    embedded = not os.environ.get("DATABASE_URL")
    url = resolve_database_url(allow_embedded=True)
    resolve_dagster_storage_url(allow_embedded=True)
    if embedded:
        if apply_migrations(url):  # an upgrade: the large tenants' graphs it leaves to build (sql/052)
            from ingestion_pipeline.core.db import Database
            from ingestion_pipeline.documents import search, vector_index

            with Database(url, max_size=1, name="migrate") as db:
                vector_index.ensure_graphs(db, search.EXACT_SEARCH_MAX_CHUNKS)
    else:
        with psycopg.connect(url) as conn:
            check_schema(conn)
    return Context(url, load_settings())


def check_databases() -> None:
    """The application database answers with a current schema, and Dagster's storage answers; the CLI turns
    ``psycopg.OperationalError`` into exit 3 and ``SchemaOutOfDate`` into exit 4."""
    with bootstrap():  # sets DAGSTER_HOME and DAGSTER_PG_URL when unset; connects to the application database
        pass
    storage = resolve_dagster_storage_url(allow_embedded=True)
    try:
        check_reachable(storage.replace("postgresql+psycopg2://", "postgresql://", 1))
    except psycopg.OperationalError as exc:
        raise psycopg.OperationalError(f"Dagster's storage (DAGSTER_PG_URL) does not answer: {exc}") from exc
