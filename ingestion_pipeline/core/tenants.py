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
