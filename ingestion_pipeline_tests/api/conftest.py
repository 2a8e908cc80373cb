"""The API in-process (TestClient) with two tenants, an admin and a user each, and their tokens."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
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


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    headers: dict[str, str]
    upload_dir: Path
    env: dict[str, str]  # the server's environment: a command run with it works on the server's database and store
    email: str  # the acme admin's, whose password is PASSWORD

    def status(self, field: str) -> int:
        """VmRSS / VmHWM of the server process, in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    def reset_peak(self) -> None:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_token(database_url: str, tenant: str, email: str, role: str = "user") -> str:
    """A new user of ``tenant`` (created with the tenant if need be) and a token for it."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant,))
        user_id = conn.execute(
            "INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, %s, %s) "
            "RETURNING user_id::text", (tenant, email, _password_hash(), role)).fetchone()[0]
    return issue_token(Principal(user_id, tenant, role), SECRET, expiry_seconds=3600)


@contextmanager
def start_server(database_url: str, tmp_path: Path, **extra_env: str) -> Iterator[Server]:
    """`ingestion-pipeline serve` on a free 127.0.0.1 port, ready, with an acme admin's token; stopped after."""
    port = _free_port()
    upload_dir = tmp_path / "server_uploads"
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": SECRET, "INGESTION_UPLOAD_DIR": str(upload_dir),
           "INGESTION_DATA_DIR": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path), **extra_env}
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ingestion-pipeline"), "serve", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.3)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme') ON CONFLICT DO NOTHING")
            user_id = conn.execute(
                """INSERT INTO users (tenant_id, email, password_hash, role) VALUES ('acme', %s, %s, 'admin')
                   RETURNING user_id::text""", (f"server-{port}@acme.example", _password_hash())).fetchone()[0]
        token = issue_token(Principal(user_id, "acme", "admin"), SECRET, expiry_seconds=3600)
        yield Server(url, proc, {"Authorization": f"Bearer {token}"}, upload_dir, env, f"server-{port}@acme.example")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
