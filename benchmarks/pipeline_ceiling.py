"""The pipeline's own ceiling: how many chunks per second it carries when the model costs nothing, and where
the time goes then — what a GPU that embeds thousands of chunks a second would leave.

The encoder is replaced by a stand-in (BENCHMARK ONLY, printed so): each text's vector is a fixed
pseudo-random unit vector drawn from its SHA-256, returned at once. Everything else is the pipeline as it runs:
``submit`` of the corpus's documents into a fresh knowledge base, then ``process`` (the Dagster job in this
process): fetch, extract, chunk, stage, embed (the stand-in), promote with the HNSW and full-text indexes.
``--preload N`` first fills the index with N synthetic chunks of 20 other tenants (``search_latency.py``'s
data), so promotion pays index maintenance at that size.

    .venv/bin/python benchmarks/pipeline_ceiling.py [--corpus DIR] [--preload 1000000] [--data-dir DIR]

Prints files, chunks, wall seconds and chunks/s end to end (every vector in its HNSW graph), when the last version
became searchable (its promotion committed: vectors not in the graph yet are ranked exactly), each step's share of
the files' time (the ledger's ``timings_ms``, which gives every file of a batch the whole of a step that works
across files), and each Dagster step's wall time (the run's step statistics: where the end-to-end time goes).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_quality as rq  # noqa: E402  (the data folder and the corpus)

TENANT = "ceiling"


class InstantEncoder:
    """BENCHMARK ONLY: a text's vector is drawn from its SHA-256 (unit length), at no cost."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).normal(size=self.dimension).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows) if rows else np.zeros((0, self.dimension), dtype=np.float32)


def preload(url: str, chunks: int) -> float:
    """``chunks`` synthetic chunks in 20 other tenants, indexed; seconds it took."""
    from search_latency import load, tenant_sizes

    from ingestion_pipeline.core.db import connect

    started = time.perf_counter()
    with connect(url, autocommit=True) as conn:
        load(conn, tenant_sizes(chunks, 20), np.random.default_rng(7))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None, help="the corpus's documents folder")
    parser.add_argument("--preload", type=int, default=0, help="synthetic chunks indexed before (default none)")
    parser.add_argument("--data-dir", type=Path, help="the knowledge base's folder (default: a temporary one)")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    corpus = args.corpus or rq.default_corpus()
    files = sorted(p for p in corpus.iterdir() if p.is_file())
    from ingestion_pipeline.cli.bootstrap import Context, bootstrap
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.documents.embedding import Embedder
    from ingestion_pipeline.documents.intake import submit_uploads

    with rq.knowledge_base_folder(args.data_dir):
        ctx = bootstrap()
        if args.preload:
            print(f"preloading {args.preload:,} synthetic chunks in 20 tenants ...", flush=True)
            print(f"preloaded in {preload(ctx.url, args.preload):.0f} s", flush=True)
        embedder = Embedder(rq.model_folder(ctx), ctx.settings.embedding.batch_size)
        embedder._model = InstantEncoder(embedder.file_info.dimension)  # the stand-in, never the real model
        fast = Context(ctx.url, ctx.settings, embedder=embedder)
        print(f"encoder: BENCHMARK-ONLY stand-in (a hashed unit vector per text, no model); {len(files)} files of "
              f"{corpus}; index before: {args.preload:,} chunks", flush=True)
        submit_uploads(fast.db, fast.document_store, tenant_id=TENANT, paths=files, keys=[p.name for p in files],
                       fingerprint=fast.fingerprint, max_bytes=fast.settings.upload.max_bytes)
        with fast.db.connection() as conn:
            db_started = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            summaries = process_queued(fast, argparse.Namespace(json=True))
        wall = time.perf_counter() - started
        step_walls = dagster_step_seconds([s["dagster_run_id"] for s in summaries])
        with fast.db.connection() as conn:
            rows = conn.execute(
                """SELECT status, coalesce((stats ->> 'chunks')::int, 0) AS chunks, stats -> 'timings_ms' AS ms
                     FROM ingestion_runs WHERE tenant_id = %s""", (TENANT,)).fetchall()
            # a version is searchable once its promotion commits (its vectors ranked exactly until the HNSW
            # graph takes them, later in the same step): when the last one was
            searchable = conn.execute(
                "SELECT extract(epoch FROM max(activated_at) - %s)::float8 AS s FROM document_versions "
                "WHERE tenant_id = %s", (db_started, TENANT)).fetchone()["s"] or wall
        chunks = sum(r["chunks"] for r in rows if r["status"] == "succeeded")
        steps: dict[str, int] = {}
        for r in rows:
            for step, ms in (r["ms"] or {}).items():
                steps[step] = steps.get(step, 0) + int(ms)
        total = sum(steps.values()) or 1
        succeeded = sum(r["status"] == "succeeded" for r in rows)
        print(f"{succeeded}/{len(rows)} files succeeded, {chunks:,} chunks in {wall:.1f} s: "
              f"{chunks / wall:,.0f} chunks/s end to end (submit excluded, every vector in its HNSW graph)")
        print(f"every version searchable after {searchable:.1f} s: {chunks / searchable:,.0f} chunks/s")
        print("each step's share of the files' time (summed over files; two lanes run at once):")
        for step, ms in sorted(steps.items(), key=lambda item: -item[1]):
            print(f"  {step:<10} {ms / 1000:>8.1f} s  {ms / total:>6.1%}  {chunks / (ms / 1000) if ms else 0:>9,.0f} "
                  "chunks/s alone")
        print(f"each Dagster step's wall time (summed over {len(summaries)} runs; steps of one run follow each other):")
        step_total = sum(step_walls.values()) or 1
        for step, seconds in sorted(step_walls.items(), key=lambda item: -item[1]):
            print(f"  {step:<34} {seconds:>7.1f} s  {seconds / step_total:>6.1%}")
        print(f"  {'outside the steps (launch, Dagster)':<34} {wall - step_total:>7.1f} s")
        fast.db.close()
        ctx.db.close()


def dagster_step_seconds(run_ids: list[str]) -> dict[str, float]:
    """Each step's wall time from start to end, summed over the runs (the project's Dagster instance). The
    ledger's per-file timings give every file of a batch the whole step's time, so they over-count a step that
    works across files (embed); these do not."""
    from ingestion_pipeline.runtime.pooled_instance import pooled_instance

    seconds: dict[str, float] = {}
    instance = pooled_instance()
    for run_id in run_ids:
        for stat in instance.get_run_step_stats(run_id):
            if stat.start_time and stat.end_time:
                step = stat.step_key.split("[")[0]
                seconds[step] = seconds.get(step, 0.0) + stat.end_time - stat.start_time
    return seconds


if __name__ == "__main__":
    main()
