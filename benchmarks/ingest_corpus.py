"""Ingest the sample corpus into a fresh database and print throughput figures.

Prints documents/s, chunks/s, the share of wall time spent inside the embedding model, and the time
and embedding count of a second, unchanged run (which should embed nothing). Not part of the tests.

    .venv/bin/python benchmarks/ingest_corpus.py --corpus ../shared/corpus/documents
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default="../shared/corpus/documents")
    parser.add_argument("--tenant", default="bench")
    args = parser.parse_args()
    files = sorted(p for p in Path(args.corpus).iterdir() if p.is_file())
    work = Path(tempfile.mkdtemp(prefix="ip-bench-"))
    os.environ["INGESTION_DATA_DIR"] = str(work)  # fresh embedded database and upload store
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("DAGSTER_PG_URL", None)
    home = work / "dagster_home"
    home.mkdir()
    from ingestion_pipeline.core.settings import instance_home

    shutil.copy(instance_home() / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    logging.disable(logging.INFO)

    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres
    from ingestion_pipeline.documents.intake import submit_upload

    try:
        ctx = bootstrap()
        total_bytes = sum(p.stat().st_size for p in files)

        def run_once() -> float:
            start = time.perf_counter()
            for path in files:
                submit_upload(ctx.db, ctx.document_store, tenant_id=args.tenant, path=path, fingerprint=ctx.fingerprint,
                              max_bytes=ctx.settings.upload.max_bytes)
            with contextlib.redirect_stdout(io.StringIO()):
                process_queued(ctx, argparse.Namespace(json=True))
            return time.perf_counter() - start

        first_s = run_once()
        with ctx.db.connection() as conn:
            stats = conn.execute(
                """SELECT count(*) FILTER (WHERE status = 'succeeded') AS docs,
                          coalesce(sum((stats->>'chunks')::int), 0) AS chunks,
                          coalesce(sum((stats->>'tokens')::bigint), 0) AS tokens,
                          coalesce(sum((stats->>'embedded')::int), 0) AS embedded,
                          coalesce(sum((stats->>'model_ms')::bigint), 0) AS model_ms,
                          count(*) FILTER (WHERE status = 'failed') AS failed
                     FROM ingestion_runs"""
            ).fetchone()
            runs_before = conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"]
        second_s = run_once()
        with ctx.db.connection() as conn:
            runs_after = conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"]
            embedded_second = conn.execute(
                "SELECT coalesce(sum((stats->>'embedded')::int), 0) AS n FROM ingestion_runs WHERE file_id > %s",
                (runs_before,),
            ).fetchone()["n"]

        print(f"corpus: {len(files)} files, {total_bytes / 1e6:.1f} MB ({args.corpus})")
        print(f"first run: {first_s:.1f} s wall (includes model load, process start-up per batch in-process)")
        print(f"  documents: {stats['docs']} succeeded, {stats['failed']} failed")
        print(f"  documents/s: {stats['docs'] / first_s:.2f}")
        print(f"  chunks: {stats['chunks']}  tokens: {stats['tokens']}  chunks/s: {stats['chunks'] / first_s:.1f}")
        model_s = float(stats["model_ms"]) / 1000
        print(f"  embedded: {stats['embedded']} chunks; inside the embedding model: {model_s:.1f} s "
              f"= {100 * model_s / first_s:.0f}% of wall time")
        print(f"second, unchanged run: {second_s:.2f} s wall, new ledger rows: {runs_after - runs_before}, "
              f"chunks embedded: {embedded_second}")
    finally:
        stop_embedded_postgres(work / "pgdata")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
