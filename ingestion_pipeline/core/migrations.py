"""The schema: numbered SQL files of ``sql/``, applied in order, once each, recording what was applied.

Migrating is an explicit step: ``ingestion-pipeline db migrate`` (run by `make`, by the compose ``migrate``
service, before a deployment's new code starts). Every other process checks the schema's version with one
cheap query (``check_schema``) and refuses to work on an older schema with what to run. The embedded
database of the CLI is the exception: it belongs to the CLI, which migrates it as it starts it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

from ingestion_pipeline.core.settings import project_root

# Any constant works; it serialises concurrent migrators (CLI, code server, tests) on one database.
_MIGRATION_LOCK_KEY = 7_411_021

def sql_dir() -> Path:
    return project_root() / "sql"


def migration_files(directory: Path | None = None) -> list[Path]:
    files = sorted((directory or sql_dir()).glob("[0-9][0-9][0-9]_*.sql"))
    if not files:
        raise FileNotFoundError(f"no migrations found in {directory or sql_dir()}")
    return files


def apply_migrations(url: str, directory: Path | None = None) -> list[str]:
    """Apply pending migrations; returns the versions applied now (empty when up to date)."""
    applied_now: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version text PRIMARY KEY,
                       checksum text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            done = {r[0]: r[1] for r in conn.execute("SELECT version, checksum FROM schema_migrations")}
            for path in migration_files(directory):
                version = path.stem
                body = path.read_text(encoding="utf-8")
                checksum = hashlib.sha256(body.encode()).hexdigest()
                if version in done:
                    if done[version] != checksum:
                        raise RuntimeError(
                            f"migration {version} changed after it was applied; add a new migration instead"
                        )
                    continue
                with conn.transaction():
                    conn.execute(body)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, checksum) VALUES (%s, %s)",
                        (version, checksum),
                    )
                applied_now.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return applied_now



class SchemaOutOfDate(RuntimeError):
    """The database's schema is older than this code (or empty): someone must run the migrations."""


def required_version(directory: Path | None = None) -> str:
    """The newest migration this code ships: the schema version it needs."""
    return migration_files(directory)[-1].stem


def check_schema(conn: psycopg.Connection, directory: Path | None = None) -> str:
    """The schema's version, if it is the one this code needs; else ``SchemaOutOfDate`` saying what to run.

    One query on an up-to-date database (no lock, no reading of the SQL files' contents)."""
    needed = required_version(directory)
    try:
        with conn.transaction():
            row = conn.execute("SELECT max(version) AS version FROM schema_migrations").fetchone()
        current = row["version"] if isinstance(row, dict) else row[0]
    except psycopg.errors.UndefinedTable:
        current = None
    if current is None or current < needed:
        at = f"at {current}" if current else "empty (no migration applied)"
        raise SchemaOutOfDate(f"the database schema is {at}, this code needs {needed}: run "
                              "`ingestion-pipeline db migrate`")
    return current


def pending_migrations(conn: psycopg.Connection, directory: Path | None = None) -> list[str]:
    """Versions in ``sql/`` not yet recorded as applied (what a readiness check reports)."""
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS ok").fetchone()
    ok = exists["ok"] if isinstance(exists, dict) else exists[0]
    applied = set()
    if ok:
        applied = {(r["version"] if isinstance(r, dict) else r[0])
                   for r in conn.execute("SELECT version FROM schema_migrations")}
    return [p.stem for p in migration_files(directory) if p.stem not in applied]
