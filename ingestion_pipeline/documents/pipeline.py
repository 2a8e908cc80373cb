"""The document pipeline over one batch (partition): its five steps, as methods the assets call.

Each step is a plain function in its own module under ``documents/steps/`` (claim/fetch, extract, chunk, embed,
promote) that takes the batch's ``StepRunner`` (``steps/runner.py``: what the steps share — database, store,
model, the worker they claim for — and how each works its files: lanes, a file's failure kept its own,
progress). ``DocumentPipeline`` is that runner with the five steps as methods.
"""

from __future__ import annotations

from ingestion_pipeline.documents.steps import chunk, chunk_parts, claim, embed, extract, promote
from ingestion_pipeline.documents.steps.runner import FileOutcome, StepRunner, batch_report

__all__ = ["DocumentPipeline", "FileOutcome", "batch_report"]


class DocumentPipeline(StepRunner):
    """The steps of one batch, with what they need handed in: database, raw store, embedder, S3, and
    the worker (owner, Dagster run, lease) on whose behalf it claims and writes."""

    def claim_batch(self, partition_key: str, *, replay_finished: bool = False,
                    replay_failed: bool = False) -> list[FileOutcome]:
        return claim.claim_batch(self, partition_key, replay_finished=replay_finished, replay_failed=replay_failed)

    def extract_batch(self, partition_key: str) -> list[FileOutcome]:
        return extract.extract_batch(self, partition_key)

    # the fanned-out extraction (INGESTION_EXECUTOR=celery): plan, whole files and each unit as steps, assemble
    def plan_extraction(self, partition_key: str) -> tuple[list[str], list[FileOutcome]]:
        return extract.plan_extraction(self, partition_key)

    def extract_whole_files(self, partition_key: str) -> list[FileOutcome]:
        return extract.extract_whole_files(self, partition_key)

    def extract_unit(self, partition_key: str, key: str) -> FileOutcome | None:
        return extract.extract_unit(self, partition_key, key)

    def assemble_units(self, partition_key: str) -> list[FileOutcome]:
        return extract.assemble_units(self, partition_key)

    def chunk_batch(self, partition_key: str) -> list[FileOutcome]:
        return chunk.chunk_batch(self, partition_key)

    # the fanned-out chunking (INGESTION_EXECUTOR=celery): plan (and the whole files), each part a step, assemble
    def plan_chunking(self, partition_key: str) -> tuple[list[str], list[FileOutcome]]:
        return chunk_parts.plan_chunking(self, partition_key)

    def chunk_part(self, partition_key: str, key: str) -> FileOutcome | None:
        return chunk_parts.chunk_part(self, partition_key, key)

    def assemble_chunks(self, partition_key: str) -> list[FileOutcome]:
        return chunk_parts.assemble_chunks(self, partition_key)

    def embed_batch(self, partition_key: str) -> list[FileOutcome]:
        return embed.embed_batch(self, partition_key)

    # the fanned-out embedding (INGESTION_EXECUTOR=celery): plan shares, each share a step, finish
    def plan_embedding(self, partition_key: str) -> tuple[list[list[list[int]]], list[FileOutcome]]:
        return embed.plan_embedding(self, partition_key)

    def embed_share(self, partition_key: str, ranges: list[list[int]]) -> list[FileOutcome]:
        return embed.embed_share(self, partition_key, ranges)

    def finish_embedding(self, partition_key: str) -> list[FileOutcome]:
        return embed.embed_batch(self, partition_key, after_shares=True)

    def promote_batch(self, partition_key: str) -> list[FileOutcome]:
        return promote.promote_batch(self, partition_key)

    def promotion_left_work(self) -> bool:
        """Whether promoted vectors wait for their HNSW graph: what a promotion step does after its files."""
        return promote.vectors_left_to_index(self)
