"""A database of its own for a benchmark, on the server the project uses (embedded unless
``BENCH_DATABASE_URL`` or ``DATABASE_URL`` says otherwise), migrated, and dropped at the end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    """The URL of a new, migrated database named ``<prefix>_<random>``; dropped on exit, even on error."""
    import psycopg

    from ingestion_pipeline.core.db import resolve_database_url
    from ingestion_pipeline.core.migrations import apply_migrations

    server_url = os.environ.get("BENCH_DATABASE_URL") or resolve_database_url(allow_embedded=True)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = server_url.replace("/ingestion?", f"/{name}?") if "/ingestion?" in server_url else \
        server_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        apply_migrations(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
