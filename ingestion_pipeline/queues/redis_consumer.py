"""Taking jobs off the Redis queues, at least once, into the ledger exactly once.

- A job is taken with an atomic ``LMOVE`` from its queue (``high``, then normal, then ``low``; producers
  ``LPUSH``, so the right end is the oldest) into this consumer's processing list, and acknowledged
  (removed from that list) only after its ``queue_jobs`` and ledger rows are committed.
- A consumer announces itself with a heartbeat key that expires; ``return_abandoned`` (run by every
  consumer before it takes anything) hands the processing lists of consumers whose heartbeat is gone back
  to their queues, oldest at the right end, so a job taken by a consumer that died is taken again. A job
  taken twice is recognised by its ``queue_jobs`` row and only acknowledged.
- A recoverable error (database, network, disk, memory) puts the job in ``rag:ingest:queue:delayed``
  with ``retry_count`` + 1, due after the backoff (5 s, 10 s, 30 s); after ``max_retries`` it fails and is
  dead-lettered. A malformed message, an unknown rag or a path outside the rag's root is dead-lettered with
  the reason; the consumer goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import is_transient
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.queues import dead_letters, job_status, redis_keys
from ingestion_pipeline.queues.dead_letters import MOVE_IF_HELD
from ingestion_pipeline.queues.job_errors import JobError, from_exception, job_error
from ingestion_pipeline.queues.job_intake import ACCEPTED, ALREADY, REFUSED, accept_job
from ingestion_pipeline.queues.job_messages import JobMessage, MalformedJob, parse_job, utc_timestamp

_log = logging.getLogger("ingestion_pipeline.queues")
HEARTBEAT_SECONDS = 30.0  # a consumer silent this long is dead; its jobs go back to the queues
# Remove ARGV[1] from KEYS[1] and, only if it was there, add ARGV[3] to the sorted set KEYS[2] at score ARGV[2].
_DELAY_IF_HELD = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
"""
# Move up to 100 due members of the sorted set KEYS[1] (JSON: priority, message) to the right end of their queue.
_RETURN_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, member in ipairs(due) do
  local entry = cjson.decode(member)
  redis.call('ZREM', KEYS[1], member)
  redis.call('RPUSH', entry['queue'], entry['message'])
end
return #due
"""


@dataclass
class ConsumeReport:
    taken: int = 0
    outcomes: Counter = field(default_factory=Counter)  # accepted / already accepted / failed / refused / ...
    returned: int = 0  # jobs of dead consumers handed back
    due: int = 0  # retries whose backoff ended

    def as_dict(self) -> dict:
        return {"taken": self.taken, **dict(self.outcomes), "returned": self.returned, "retries_due": self.due}


def new_consumer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class RedisJobConsumer:
    def __init__(self, redis, db: Database, store: UploadStore, *, fingerprint: str, max_bytes: int,
                 backoff: tuple[float, ...] = (5.0, 10.0, 30.0), consumer_id: str | None = None,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self.redis, self.db, self.store = redis, db, store
        self.heartbeat_seconds = heartbeat_seconds
        self.fingerprint, self.max_bytes, self.backoff = fingerprint, max_bytes, backoff
        self.consumer_id = consumer_id or new_consumer_id()

    # -- the consumer's life ------------------------------------------------------------------------------------
    def consume(self, max_jobs: int) -> ConsumeReport:
        """Take up to ``max_jobs`` jobs, accept each into the ledger, acknowledge it; then write statuses."""
        report = ConsumeReport()
        stop = threading.Event()
        self._beat()
        self.redis.sadd(redis_keys.CONSUMERS, self.consumer_id)
        beating = threading.Thread(target=self._keep_beating, args=(stop,), daemon=True, name="redis-heartbeat")
        beating.start()
        try:
            report.returned = self.return_abandoned()
            report.due = self.return_due()
            while report.taken < max_jobs:
                taken = self.take()
                if taken is None:
                    break
                report.taken += 1
                report.outcomes[self.handle(*taken)] += 1
            try:
                job_status.sync_statuses(self.db, self.redis)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                _log.warning("job statuses not written this round (%s); the next round writes them", exc)
        finally:
            stop.set()
            beating.join()
            self._leave()
        return report

    def _beat(self) -> None:
        self.redis.set(redis_keys.heartbeat(self.consumer_id), utc_timestamp(),
                       px=max(1, int(self.heartbeat_seconds * 1000)))

    def _keep_beating(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_seconds / 3):
            # a missed beat only risks a job taken twice, which is recognised
            with contextlib.suppress(Exception):
                self._beat()

    def _leave(self) -> None:
        """Say goodbye if nothing is held (a job still held after a Redis error stays for the janitor).
        Runs in ``consume``'s ``finally``: a Redis that fails here too is left to the heartbeat's expiry, so
        the error that ended the round is the one raised, not this one."""
        try:
            held = sum(self.redis.llen(redis_keys.processing(self.consumer_id, p)) for p in redis_keys.PRIORITIES)
            if not held:
                self.redis.srem(redis_keys.CONSUMERS, self.consumer_id)
                self.redis.delete(redis_keys.heartbeat(self.consumer_id))
        except RedisError as exc:
            _log.warning("consumer %s could not leave (%s): its heartbeat expires instead", self.consumer_id, exc)

    # -- taking and acknowledging ---------------------------------------------------------------------------------
    def take(self) -> tuple[str, bytes] | None:
        for priority in redis_keys.PRIORITIES:
            raw = self.redis.lmove(redis_keys.queue(priority), redis_keys.processing(self.consumer_id, priority),
                                   "RIGHT", "LEFT")
            if raw is not None:
                failpoint("queue.taken")  # taken, nothing committed: the janitor must hand it back
                return priority, raw
        return None

    def ack(self, priority: str, raw: bytes) -> None:
        self.redis.lrem(redis_keys.processing(self.consumer_id, priority), 1, raw)

    def handle(self, priority: str, raw: bytes) -> str:
        """Turn one taken message into a ledger row (or a retry, a failure, a dead letter); the outcome."""
        try:
            job = parse_job(raw)
        except MalformedJob as exc:
            self.dead_letter(priority, raw, job_error("ERR_MALFORMED_MESSAGE", str(exc)))
            return "malformed"
        try:
            intake = accept_job(self.db, self.store, job, fingerprint=self.fingerprint, max_bytes=self.max_bytes)
        except Exception as exc:  # noqa: BLE001 - every error is classified: retried, or failed and dead-lettered
            return self._after_error(priority, raw, job, from_exception(exc))
        if intake.outcome == REFUSED:
            job_status.write(self.redis, job.job_id, {**job_status.initial(job, "failed"), **_error_fields(
                intake.error)}, final=True)
            self.dead_letter(priority, raw, intake.error, job)
        else:
            failpoint("queue.accepted")  # the ledger row committed, the message not yet acknowledged
            if intake.outcome == ACCEPTED and intake.job_status == "queued":
                job_status.write(self.redis, job.job_id, {**job_status.initial(job, "queued"),
                                                          "file_id": intake.file_id})
            elif intake.outcome == ALREADY and intake.job_status in ("queued", "processing"):
                # accepted before, and its status write may have died with the consumer (or with Redis)
                job_status.write(self.redis, job.job_id, {"status": intake.job_status, "file_id": intake.file_id})
            self.ack(priority, raw)  # the row is committed (or was already): the message may go
        return intake.outcome

    def _after_error(self, priority: str, raw: bytes, job: JobMessage, error: JobError) -> str:
        if error.recoverable and job.retry_count < job.max_retries:
            again = job.retried()
            delay = self.backoff[min(job.retry_count, len(self.backoff) - 1)]
            member = json.dumps({"queue": redis_keys.queue(priority), "message": again.to_json()})
            self.redis.eval(_DELAY_IF_HELD, 2, redis_keys.processing(self.consumer_id, priority), redis_keys.DELAYED,
                            raw, time.time() + delay, member)
            job_status.write(self.redis, job.job_id, {**job_status.initial(again, "submitted"),
                                                      **_error_fields(error)})
            return "retrying"
        if error.recoverable:
            error = JobError(error.code, f"{error.message} (after {job.retry_count} retries)", False,
                             error.suggestions)
        job_status.write(self.redis, job.job_id, {**job_status.initial(job, "failed"), **_error_fields(error)},
                         final=True)
        self.dead_letter(priority, raw, error, job)
        return "failed"

    def dead_letter(self, priority: str, raw: bytes, error: JobError, job: JobMessage | None = None) -> None:
        item = dead_letters.entry(raw, reason=error.message, error_code=error.code, priority=priority,
                                  job_id=job.job_id if job else None)
        self.redis.eval(MOVE_IF_HELD, 2, redis_keys.processing(self.consumer_id, priority), redis_keys.DEAD_LETTER,
                        raw, item, "LPUSH")

    # -- the janitor's part ---------------------------------------------------------------------------------------
    def return_abandoned(self) -> int:
        """Hand the jobs of consumers whose heartbeat expired back to their queues; how many."""
        returned = 0
        for member in self.redis.smembers(redis_keys.CONSUMERS):
            consumer = member.decode() if isinstance(member, bytes) else member
            if consumer == self.consumer_id or self.redis.exists(redis_keys.heartbeat(consumer)):
                continue
            for priority in redis_keys.PRIORITIES:
                # newest first from the left, each to the right end: the oldest ends where it is taken next
                while self.redis.lmove(redis_keys.processing(consumer, priority), redis_keys.queue(priority),
                                       "LEFT", "RIGHT") is not None:
                    returned += 1
            self.redis.srem(redis_keys.CONSUMERS, consumer)
        return returned

    def return_due(self) -> int:
        """Retries whose backoff has ended go back to the right end of their queue."""
        return int(self.redis.eval(_RETURN_DUE, 1, redis_keys.DELAYED, time.time()))


def _error_fields(error: JobError | None) -> dict:
    if error is None:
        return {}
    return {"error": error.message, "error_code": error.code, "error_type": error.error_type,
            "suggestions": list(error.suggestions), "failed_at" if not error.recoverable else "last_error_at":
            utc_timestamp()}
