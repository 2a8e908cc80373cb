"""One round of the Redis intake, the same for the sensor and `process`: connect, take up to a bound of jobs
into the ledger, write statuses, and say how deep the queues are.

With ``REDIS_URL`` unset and nothing listening on the default address, or ``REDIS_URL=none``, there is no Redis
queue (None); with
``REDIS_URL`` set, a server that does not answer is ``RedisUnavailable``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.queues import job_status, queue_depths, redis_client
from ingestion_pipeline.queues.redis_consumer import ConsumeReport, RedisJobConsumer


class RedisUnavailable(RuntimeError):
    """REDIS_URL names a server that does not answer."""


@dataclass
class RedisRound:
    report: ConsumeReport
    depths: dict

    def summary(self) -> str:
        taken = ", ".join(f"{n} {what}" for what, n in sorted(self.report.outcomes.items()))
        return (f"took {self.report.taken} job(s){': ' + taken if taken else ''}; "
                f"{queue_depths.summary(self.depths)}")


def open_queue(settings: Settings):
    """The Redis client of the job queue, or None when there is none (see the module's note)."""
    if settings.queues.redis_url is None:
        return None
    if redis_client.reachable(settings.queues.redis_url):
        return redis_client.connect(settings.queues.redis_url)
    if settings.queues.redis_configured:
        raise RedisUnavailable(f"Redis at {redis_client.describe(settings.queues.redis_url)} does not answer "
                               "(REDIS_URL); jobs stay on the queue until it does")
    return None


def take_jobs(client, db: Database, store: UploadStore, settings: Settings, *, fingerprint: str,
              max_jobs: int | None = None) -> RedisRound:
    consumer = RedisJobConsumer(client, db, store, fingerprint=fingerprint, max_bytes=settings.upload.max_bytes,
                                backoff=settings.reliability.retry_backoff_seconds or (5.0,),
                                heartbeat_seconds=settings.queues.consumer_heartbeat_seconds)
    report = consumer.consume(max_jobs or settings.queues.jobs_per_tick)
    return RedisRound(report, queue_depths.depths(client))


@contextmanager
def following_statuses(client, db: Database, interval: float = 2.0) -> Iterator[None]:
    """While the block runs (`process` running batches), write job statuses as the ledger moves, every
    ``interval`` seconds; once more at the end."""
    stop = threading.Event()

    def follow() -> None:
        while not stop.wait(interval):
            # a missed sync is repeated at the next interval and at the end
            with contextlib.suppress(Exception):
                job_status.sync_statuses(db, client)

    thread = threading.Thread(target=follow, daemon=True, name="redis-job-status")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        job_status.sync_statuses(db, client)
