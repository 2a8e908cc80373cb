"""Putting jobs on the Redis queue (``queue push``, and how another service does the same).

A producer writes the job's status hash (``submitted``) and ``LPUSH``es the message in one Redis
transaction, so a job on the queue always has a status to read.
"""

from __future__ import annotations

from ingestion_pipeline.queues import job_status, redis_keys
from ingestion_pipeline.queues.job_messages import JobMessage


def push(redis, job: JobMessage, priority: str = "normal") -> None:
    queue = redis_keys.queue(priority)
    values = job_status.initial(job, "submitted")
    pipe = redis.pipeline(transaction=True)
    pipe.hset(redis_keys.status(job.job_id), mapping={k: job_status.field_text(v) for k, v in values.items()})
    pipe.lpush(queue, job.to_json())
    pipe.execute()
