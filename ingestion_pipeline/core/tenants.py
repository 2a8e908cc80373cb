"""Tenant ids come from trusted context (CLI flag, source configuration), never from file content."""

from __future__ import annotations

import re

import psycopg

_TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def validate_tenant_id(tenant_id: str) -> str:
    if not isinstance(tenant_id, str) or not _TENANT_ID.match(tenant_id):
        raise ValueError(
            f"invalid tenant id {tenant_id!r}: use 1-63 characters of a-z, 0-9, '_' or '-', starting with a "
            "letter or digit"
        )
    return tenant_id


def ensure_tenant(conn: psycopg.Connection, tenant_id: str) -> None:
    conn.execute(
        "INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT (tenant_id) DO NOTHING",
        (validate_tenant_id(tenant_id),),
    )
