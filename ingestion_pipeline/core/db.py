"""Connections to the application database (psycopg 3) and where its URL comes from."""

from __future__ import annotations

import os

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row


def resolve_database_url() -> str:
    """``DATABASE_URL`` when set, otherwise the embedded server (started on demand)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from ingestion_pipeline.core.embedded_postgres import ensure_embedded_postgres

    url = ensure_embedded_postgres()
    os.environ["DATABASE_URL"] = url  # child processes (dagster dev, code servers) share it
    return url


def resolve_dagster_storage_url() -> str:
    """URL for Dagster's own storage: ``DAGSTER_PG_URL``, else derived from the application database.

    dagster-postgres must be given the psycopg2 driver explicitly (DESIGN.md).
    """
    url = os.environ.get("DAGSTER_PG_URL")
    if url:
        return url
    app_url = resolve_database_url()
    if "?host=" in app_url and "@/" in app_url:  # the embedded server's socket URL
        from ingestion_pipeline.core.embedded_postgres import embedded_dagster_url

        url = embedded_dagster_url(app_url)
    else:
        url = app_url.replace("postgresql://", "postgresql+psycopg2://", 1).replace(
            "postgres://", "postgresql+psycopg2://", 1
        )
    os.environ["DAGSTER_PG_URL"] = url
    return url


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection:
    conn = psycopg.connect(url, row_factory=dict_row, autocommit=autocommit)
    register_vector(conn)
    return conn

