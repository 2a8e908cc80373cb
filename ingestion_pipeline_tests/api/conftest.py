"""The API in-process (TestClient) with two tenants, an admin and a user each, and their tokens."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from ingestion_pipeline.api.app import create_app
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core import users
from ingestion_pipeline.core.access_tokens import Principal, issue_token
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import ApiSettings, load_settings
from ingestion_pipeline.core.tenants import ensure_tenant
from ingestion_pipeline_tests.helpers import shared_embedder

SECRET = "test-secret-that-is-long-enough-0123456789"
PASSWORD = "correct horse battery"


@dataclass
class Api:
    client: TestClient
    services: ApiServices
    tokens: dict[str, str]  # "acme-admin", "acme-user", "globex-admin", "globex-user"

    def as_(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@functools.cache
def _password_hash() -> str:
    return users.hash_password(PASSWORD)  # cost 12 takes ~0.3 s: once per session, not per user


def make_api(database: Database, api_settings: ApiSettings) -> Api:
    """Four users (their rows as `users add` writes them) and a token each, as `/v1/auth/token` issues it
    (test_auth.py logs in for real)."""
    services = ApiServices(database, load_settings(), api_settings, embedder=shared_embedder())
    client = TestClient(create_app(services))
    tokens = {}
    with database.connection() as conn:
        for tenant in ("acme", "globex"):
            ensure_tenant(conn, tenant)
            for role in ("admin", "user"):
                user_id = conn.execute(
                    """INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, %s, %s)
                       RETURNING user_id::text""",
                    (tenant, f"{role}@{tenant}.example", _password_hash(), role),
                ).fetchone()["user_id"]
                tokens[f"{tenant}-{role}"] = issue_token(Principal(user_id, tenant, role), SECRET,
                                                         expiry_seconds=3600)
    return Api(client, services, tokens)


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    yield make_api(database, ApiSettings(jwt_secret=SECRET))
