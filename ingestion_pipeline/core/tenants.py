"""Tenant ids come from trusted context (CLI flag, source configuration), never from file content."""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.identifiers import validate_identifier


def validate_tenant_id(tenant_id: str) -> str:
    return validate_identifier(tenant_id, "tenant id")


def ensure_tenant(conn: psycopg.Connection, tenant_id: str) -> None:
    conn.execute(
        "INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT (tenant_id) DO NOTHING",
        (validate_tenant_id(tenant_id),),
    )


def set_paused(conn: psycopg.Connection, tenant_id: str, paused: bool) -> dict:
    """Pause or resume a tenant: a paused tenant's work is not launched, and its in-flight files and
    uploads go back to the queue at their next step boundary (their staged work is kept)."""
    ensure_tenant(conn, tenant_id)
    return conn.execute(
        """UPDATE tenants SET paused = %s, paused_at = CASE WHEN %s THEN now() END WHERE tenant_id = %s
           RETURNING tenant_id, paused, paused_at""",
        (paused, paused, tenant_id),
    ).fetchone()


def is_paused(conn: psycopg.Connection, tenant_id: str) -> bool:
    row = conn.execute("SELECT paused FROM tenants WHERE tenant_id = %s", (tenant_id,)).fetchone()
    return bool(row and row["paused"])
