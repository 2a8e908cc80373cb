"""Applies the numbered SQL files of ``sql/`` in order, once each, recording what was applied."""

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
                body = path.read_text()
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



def pending_migrations(conn: psycopg.Connection, directory: Path | None = None) -> list[str]:
    """Versions in ``sql/`` not yet recorded as applied (what a readiness check reports)."""
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS ok").fetchone()
    ok = exists["ok"] if isinstance(exists, dict) else exists[0]
    applied = set()
    if ok:
        applied = {(r["version"] if isinstance(r, dict) else r[0])
                   for r in conn.execute("SELECT version FROM schema_migrations")}
    return [p.stem for p in migration_files(directory) if p.stem not in applied]
