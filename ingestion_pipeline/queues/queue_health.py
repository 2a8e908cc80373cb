"""Dead letters of every configured queue, by name: the Redis list, and each SQS queue's dead-letter queue
(from its redrive policy). What the ``queue_dead_letters_empty`` check and `queue status` report."""

from __future__ import annotations

from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.queues import dead_letters, redis_keys
from ingestion_pipeline.queues.redis_intake import RedisUnavailable, open_queue


def dead_letter_depths(settings: Settings) -> dict[str, int]:
    depths: dict[str, int] = {}
    try:
        client = open_queue(settings)
    except RedisUnavailable:
        client = None
    if client is not None:
        try:
            depths[redis_keys.DEAD_LETTER] = dead_letters.depth(client)
        finally:
            client.close()
    if settings.queues.sqs_queue_urls:
        from ingestion_pipeline.queues.sqs_queues import dead_letter_depth, sqs_client

        sqs = sqs_client()
        for url in settings.queues.sqs_queue_urls:
            name, depth = dead_letter_depth(sqs, url)
            if name is not None:
                depths[name] = depth
    return depths
