"""Staleness shown before any batch runs: code versions of the code, and ``fingerprints_current`` as a check
that runs on its own.

Each document asset's ``code_version`` is static: the extractor's and the chunker's versions, which change only
with the code. After a deploy that changes one, Dagster marks every partition materialised under the old version
stale, with its own badges. What a deployment decides at run time (the chunk budgets, the model and the precision
it runs in: ``documents/model_decision.py``) is the pipeline fingerprint, read when a run or a sensor needs it,
never when the code location loads: loading defines, it reads no model and no database.

``fingerprints_current`` (warn) counts the active versions, across tenants, not made by the current
fingerprint. Every batch run evaluates it after promoting; the UI's Execute button runs it alone; and
``fingerprint_sensor`` launches ``fingerprint_check_job`` when the current fingerprint or the set of the active
versions' fingerprints changes: a deploy with new chunking settings shows as a warning at once, and the
warning clears when the re-index is done.
"""

import hashlib
import json

import dagster as dg

from ingestion_pipeline import services
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.documents import reindex, serving_models
from ingestion_pipeline.documents.chunking import CHUNKER_VERSION
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION
from ingestion_pipeline.documents.fingerprint import TOKEN_VECTORS

CHECK_NAME = "fingerprints_current"


def code_versions() -> dict[str, str]:
    """Asset name -> code version: the versions of the code that makes each output, nothing of the host or
    the environment (every host that loads the code location defines the same assets)."""
    chunks = f"extractor-{EXTRACTOR_VERSION}.chunker-{CHUNKER_VERSION}"
    embedded = f"{chunks}.token-vectors-{TOKEN_VECTORS}"
    return {"document_elements": f"extractor-{EXTRACTOR_VERSION}", "document_chunks": chunks,
            "document_embeddings": embedded, "promoted_documents": embedded}


@dg.asset_check(asset="promoted_documents", name=CHECK_NAME, blocking=False,
                description="every active version (all tenants) was made by the current pipeline fingerprint; "
                            "a warning says a re-index (backfill) is due")
def fingerprints_current(postgres: PostgresResource, embedder: dg.ResourceParam[Embedder],
                         settings: SettingsResource) -> dg.AssetCheckResult:
    current = services.fingerprint(settings.get(), embedder)
    with postgres.db.connection() as conn:
        stale = reindex.stale_counts(conn, services.fingerprint_of_elements(settings.get(), embedder))
        # a model change: how many active versions hold the current model's vectors (the rest still serve
        # search with their own model's until the re-index reaches them)
        migration = serving_models.migration_progress(conn, embedder.info.name)
    stale = {**stale, "model_migration": migration.summary(), "versions_under_current_model": migration.done}
    if not stale["active"]:  # nothing to check is not a pass
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description="no active version yet: nothing was checked",
                                   metadata={**stale, "current_fingerprint": current})
    return dg.AssetCheckResult(
        passed=stale["stale"] == 0, severity=dg.AssetCheckSeverity.WARN,
        description=(f"all {stale['active']} active versions are current" if not stale["stale"] else
                     f"{stale['stale']} of {stale['active']} active versions were made by another pipeline "
                     "fingerprint: run `ingestion-pipeline reindex` or backfill the batches from the UI; versions "
                     "that need their file again are listed by `ingestion-pipeline reindex --dry-run`"),
        metadata={**stale, "current_fingerprint": current},
    )


fingerprint_check_job = dg.define_asset_job(
    "fingerprint_check_job", selection=dg.AssetSelection.checks(fingerprints_current),
    description="Evaluate fingerprints_current alone: how many active versions a re-index would change.",
)


@dg.sensor(job=fingerprint_check_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Runs fingerprints_current when the pipeline fingerprint or the active versions' "
                       "fingerprints change (a deploy with new settings, a finished re-index).")
def fingerprint_sensor(postgres: PostgresResource, embedder: dg.ResourceParam[Embedder],
                       settings: SettingsResource) -> dg.RunRequest:
    current = services.fingerprint(settings.get(), embedder)
    with postgres.db.connection() as conn:
        seen = reindex.active_fingerprints(conn)
    state = hashlib.sha256(json.dumps([current, seen]).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=f"fingerprints-{state}")  # once per state: Dagster skips a key it launched


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(asset_checks=[fingerprints_current], jobs=[fingerprint_check_job],
                          sensors=[fingerprint_sensor])
