"""What a process that executes step after step keeps from one step to the next: its pool, model, extraction workers.

A Celery worker's process executes step after step and a run worker (``run_worker.py``) run after run, each
initialising the run's resources anew; with ``keep_across_steps()`` called first, the resources take the process's
own database pool, lease connection, Embedder (the loaded model) and extraction workers from here instead of
building their own. Elsewhere (a run in a fresh process, `process`) they live as long as their run.
"""

from __future__ import annotations

import functools

from ingestion_pipeline import services
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import EmbeddingSettings, ExtractionLimits
from ingestion_pipeline.documents.embedding import Embedder, build_embedder
from ingestion_pipeline.documents.extraction.isolation import ExtractorPool

_keep = False


def keep_across_steps() -> None:
    """Called by `ingestion-pipeline worker` before its pool starts, and by a run worker before its run."""
    global _keep
    _keep = True


def enabled() -> bool:
    return _keep


@functools.lru_cache(maxsize=2)
def database(url: str, max_connections: int) -> Database:
    """The process's pool: a Celery step opened a pool and its first connection and closed them again, in each of a
    run's eleven steps (docs/benchmarks.md, "What each Celery step set up again"). It ends with the process; a
    connection a restarted server dropped is replaced when checked out (``core/db.py``)."""
    return Database(url, max_size=max_connections)


@functools.lru_cache(maxsize=2)
def lease_database(url: str) -> Database:
    """The heartbeat's own connection, kept as ``database`` is (a pool apart from the work's, so that a step using
    every connection still beats)."""
    return Database(url, max_size=1, name="lease-keeper")


@functools.lru_cache(maxsize=2)
def embedder(embedding: EmbeddingSettings, model_path: str | None, batch_size: int | None,
             database_url: str | None) -> Embedder:
    return build_embedder(model_path, batch_size, settings=embedding,
                          decisions=services.recorded_decisions(database_url))


def process_embedder(embedding: EmbeddingSettings) -> Embedder:
    """The Embedder an EmbedderResource of default fields takes here: a run worker loads it before its run."""
    return embedder(embedding, None, None, None)  # positional, as the resource calls it (one cache key)


class _KeptExtractorPool(ExtractorPool):
    """A step's pipeline, closed, leaves these workers for the next step (they end with the process)."""

    def close(self) -> None:
        pass


def step_extractors(limits: ExtractionLimits, lanes: int) -> ExtractorPool:
    """The extraction workers of a step: the process's own where kept across steps (each extraction worker is a
    fresh interpreter to start, and on Celery a big PDF's units are steps of their own, each of which paid that
    start: benchmarks/big_documents.py --celery measures a scan's units), else the step's own."""
    if _keep:
        return _extractors(limits, lanes)
    return ExtractorPool(limits, lanes)


@functools.lru_cache(maxsize=2)
def _extractors(limits: ExtractionLimits, lanes: int) -> ExtractorPool:
    return _KeptExtractorPool(limits, lanes)
