"""Staging cleanup: staging rows older than the retention period go; promoted tables are never touched."""

from __future__ import annotations

import psycopg


def delete_old_staging_rows(conn: psycopg.Connection, retention_days: int) -> int:
    if retention_days < 1:
        raise ValueError("staging retention must be at least one day")
    return conn.execute(
        "DELETE FROM staging_rows WHERE created_at < now() - make_interval(days => %s)", (retention_days,)
    ).rowcount
