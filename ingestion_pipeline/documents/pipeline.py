"""The document pipeline over one batch (partition): its five steps, as methods the assets call.

Each step lives in its own module under ``documents/steps/`` (claim/fetch, extract, chunk, embed, promote),
around one shared runner (``steps/runner.py``: held rows, lanes, a file's failure kept its own, progress).
"""

from __future__ import annotations

from ingestion_pipeline.documents.steps.chunk import ChunkStep
from ingestion_pipeline.documents.steps.claim import ClaimStep
from ingestion_pipeline.documents.steps.embed import EmbedStep
from ingestion_pipeline.documents.steps.extract import ExtractStep
from ingestion_pipeline.documents.steps.promote import PromoteStep
from ingestion_pipeline.documents.steps.runner import FileOutcome, batch_report

__all__ = ["DocumentPipeline", "FileOutcome", "batch_report"]


class DocumentPipeline(ClaimStep, ExtractStep, ChunkStep, EmbedStep, PromoteStep):
    """The steps of one batch, with what they need handed in: database, raw store, embedder, S3, and
    the worker (owner, Dagster run, lease) on whose behalf it claims and writes."""
