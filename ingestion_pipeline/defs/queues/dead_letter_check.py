"""``queue_dead_letters_empty``: fails while a queue's dead letters wait for a person (the Redis list and
each SQS queue's dead-letter queue), with the depths as metadata; ``queue_check_job`` runs it alone, launched
by the queue sensors when a depth changes."""

import dagster as dg

from ingestion_pipeline.defs.resources import SettingsResource
from ingestion_pipeline.queues.redis_consumer import dead_letter_depths

CHECK_NAME = "queue_dead_letters_empty"


@dg.asset_check(asset="raw_documents", name=CHECK_NAME, blocking=False,
                description="no dead letters on the Redis job queue or on the SQS queues' dead-letter queues: "
                            "`ingestion-pipeline queue dead-letter list` shows why each is there, `replay` "
                            "moves them back once fixed")
def queue_dead_letters_empty(settings: SettingsResource) -> dg.AssetCheckResult:
    depths = dead_letter_depths(settings.get())
    if not depths:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description="no queue is configured: nothing was checked")
    waiting = {name: n for name, n in depths.items() if n}
    return dg.AssetCheckResult(
        passed=not waiting,
        description="no dead letters" if not waiting else "dead letters wait: " + ", ".join(
            f"{n} on {name}" for name, n in waiting.items()),
        metadata={name: dg.MetadataValue.int(n) for name, n in depths.items()},
    )


queue_check_job = dg.define_asset_job(
    "queue_check_job", selection=dg.AssetSelection.checks(queue_dead_letters_empty),
    description="Evaluate queue_dead_letters_empty alone: how many dead letters each queue holds.",
)
