"""Test fixtures: a real embedded Postgres 16 + pgvector (one server, a fresh database per test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ingestion_pipeline.core.db import Database, connect
from ingestion_pipeline.core.embedded_postgres import ensure_embedded_postgres, stop_embedded_postgres
from ingestion_pipeline.core.migrations import apply_migrations
from ingestion_pipeline.core.redis_server import RedisServer
from ingestion_pipeline.core.settings import instance_home, project_root
from ingestion_pipeline.sources import registry
from ingestion_pipeline_tests.helpers import DOCS, put

# The suite's two workers share the machine's cores, so a run's graph sweep lowered (the default, nice 10) waits on
# the other worker's tests; its runs sweep at the server's priority. The lowered sweep is tested on its own
# (documents/test_vector_backlog.py), by the module's default.
os.environ.setdefault("INGESTION_INDEX_SWEEP_NICE", "0")
# pages are rendered for the web app only where a test looks at them (webapp/, documents/test_page_views.py): the
# corpus's big PDFs would spend minutes of the suite rendering pages nobody opens
os.environ.setdefault("INGESTION_PAGE_IMAGES", "false")


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A throwaway embedded server for the whole session, deleted at the end."""
    base = Path(tempfile.mkdtemp(prefix="ip-tests-"))
    url = ensure_embedded_postgres(base / "pgdata", cleanup_mode="delete")
    yield url
    # The session's hundreds of test databases (GBs) are thrown away: the server stops without its shutdown
    # checkpoint (by the PID in postmaster.pid, before its folder goes), and the files are removed by a process of
    # their own, so neither is on the clock of the session's last test (10 s + 11 s for 150 databases here).
    stop_embedded_postgres(base / "pgdata", immediate=True)
    trash = base.rename(base.with_name(base.name + "-removed"))  # gone from its path at once, as pgserver expects
    subprocess.Popen(["rm", "-rf", str(trash)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")


def _create_database(server_url: str, name: str) -> str:
    with psycopg.connect(_with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_database(server_url, name)


@pytest.fixture(scope="session")
def migrated_template(pg_server_url: str) -> str:
    """A database migrated once per session (and xdist worker), the template of every test's database: a copy
    takes ~0.1 s where creating and migrating one took ~0.35 s, some 260 times in the fast tier."""
    name = f"template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:6]}"
    apply_migrations(_create_database(pg_server_url, name))  # its connections are closed: a copy needs that
    return name


def copy_database(server_url: str, template: str, prefix: str = "t") -> str:
    """A new database copied from ``template`` (which nothing may be connected to), migrated; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    url = _with_database(server_url, name)
    apply_migrations(url)  # a no-op on the copy (10 ms), and what makes a template out of date impossible
    return url


@pytest.fixture
def database_url(pg_server_url: str, migrated_template: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, migrated application database (a copy of the migrated template); DATABASE_URL points at it."""
    url = copy_database(pg_server_url, migrated_template)
    monkeypatch.setenv("DATABASE_URL", url)
    return url


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    """The test database as the pipeline sees it: a connection pool."""
    with Database(database_url) as pool:
        yield pool


@pytest.fixture
def dagster_pg_url(pg_server_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database for Dagster's own storage (the project's dagster.yaml reads DAGSTER_PG_URL)."""
    url = _create_database(pg_server_url, f"dagster_{uuid.uuid4().hex[:12]}")
    url = url.replace("postgresql://", "postgresql+psycopg2://", 1)
    monkeypatch.setenv("DAGSTER_PG_URL", url)
    return url


@pytest.fixture
def project_dagster_home(tmp_path: Path, dagster_pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """DAGSTER_HOME holding the project's own dagster.yaml (Postgres storage, queued coordinator …)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(instance_home() / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture(scope="session", autouse=True)
def model_cache() -> Iterator[Path]:
    """One ONNX export of the model for the whole session, shared by the processes tests start."""
    folder = Path(tempfile.mkdtemp(prefix="ip-models-"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INGESTION_MODEL_CACHE_DIR", str(folder))
        # float32 without judging int8 and bfloat16 (minutes per model cache), for session fixtures too;
        # test_embedding_precision judges them
        patch.setenv("INGESTION_EMBEDDING_PRECISION", "f32")
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Upload store and data folder per test; never the developer's .data/."""
    monkeypatch.setenv("INGESTION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("INGESTION_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("REDIS_URL", "none")  # never a Redis the developer runs; `redis_queue` gives one
    monkeypatch.setenv("INGESTION_EMBEDDING_PRECISION", "f32")  # as model_cache does, for a test that unset it
    return tmp_path / "uploads"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 (AOF on) for this test process; stopped by its PID at the end."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_queue(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch):
    """An empty job queue: the session's server flushed, REDIS_URL pointing at it; a client to it."""
    from ingestion_pipeline.queues.redis_contract import connect

    monkeypatch.setenv("REDIS_URL", redis_server.url)
    client = connect(redis_server.url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    candidates = [os.environ.get("INGESTION_CORPUS_DIR"), project_root().parent / "shared" / "corpus"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "documents").is_dir():
            return Path(candidate)
    pytest.fail("sample corpus not found: set INGESTION_CORPUS_DIR or place it at ../shared/corpus")


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection]:
    with connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1, started by the tests and stopped at the end."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Credentials and region for boto3 (moto accepts any); the endpoint itself is set per source."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return s3_endpoint


@pytest.fixture
def bucket(s3_env: str):
    """A fresh bucket and a boto3 client for it: (client, name)."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    name = f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name


# A small knowledge base in a bucket, for the S3 source tests (defs/test_s3_sources.py, sources/).
@pytest.fixture
def kb(bucket, database, db, s3_env):
    client, name = bucket
    for key, body in DOCS.items():
        put(client, name, key, body)
    put(client, name, "kb/logo.png", b"\x89PNG....")
    source = registry.add_source(db, f"s3://{name}/kb/", tenant_id="acme", name="handbook", endpoint_url=s3_env)
    return client, name, source
