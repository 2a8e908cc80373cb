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

**One round** (``take_jobs``), the same for the intake service and `process`: connect, take up to a bound of
jobs into the ledger, write statuses, and say how deep the queues are. With ``REDIS_URL`` unset and nothing
listening on the default address, or ``REDIS_URL=none``, there is no Redis queue (``open_queue`` returns
None); with ``REDIS_URL`` set, a server that does not answer is ``RedisUnavailable``.

**Dead letters of every configured queue** (``dead_letter_depths``), by name: the Redis list, and each SQS
queue's dead-letter queue (from its redrive policy): what the ``queue_dead_letters_empty`` check and
`queue status` report.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ingestion_pipeline.core.beats import Beat
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import is_transient
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import (
    ACCEPTED,
    ALREADY,
    REFUSED,
    JobError,
    JobMessage,
    MalformedJob,
    accept_job,
    from_exception,
    job_error,
    parse_job,
    utc_timestamp,
)
from ingestion_pipeline.queues.redis_contract import MOVE_IF_HELD

# -- the consumer ------------------------------------------------------------------------------------------------------
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
# Move up to 100 due members of the sorted set KEYS[1] (JSON: queue, message) to the right end of their queue,
# which must be one of KEYS[3..]. The set is read as untrusted: a member that is not such JSON becomes a dead
# letter in KEYS[2] (ARGV[2]: the time), so one bad member never fails the round that would move the others.
_RETURN_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
local moved = 0
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  local ok, entry = pcall(cjson.decode, member)
  local target = nil
  if ok and type(entry) == 'table' and type(entry['message']) == 'string' then
    for i = 3, #KEYS do
      if entry['queue'] == KEYS[i] then target = KEYS[i] end
    end
  end
  if target then
    redis.call('RPUSH', target, entry['message'])
    moved = moved + 1
  else
    redis.call('LPUSH', KEYS[2], cjson.encode({reason = 'a delayed retry that is not one a consumer wrote',
      error_code = 'ERR_MALFORMED_RECORD', dead_lettered_at = ARGV[2], priority = 'normal',
      message = string.sub(member, 1, 2048), truncated = true, message_bytes = #member}))
  end
end
return moved
"""

# Hand each consumer's (ARGV) processing lists back to their queues (KEYS[2..]: high, normal, low, as
# redis_contract.PRIORITIES), newest first from the left, each to the right end (the oldest ends where it is
# taken next), then remove the consumer from the set KEYS[1]. A list planted with another type is left as it is.
_RETURN_HELD = """
local priorities = {'high', 'normal', 'low'}
local moved = 0
for i = 1, #ARGV do
  for j, priority in ipairs(priorities) do
    local held = 'rag:ingest:processing:' .. ARGV[i] .. ':' .. priority
    if redis.call('TYPE', held).ok == 'list' then
      while redis.call('LMOVE', held, KEYS[j + 1], 'LEFT', 'RIGHT') do moved = moved + 1 end
    end
  end
  redis.call('SREM', KEYS[1], ARGV[i])
end
return moved
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
                 heartbeat_seconds: float = HEARTBEAT_SECONDS,
                 dead_letter_max_entries: int = redis_contract.DEAD_LETTER_MAX_ENTRIES,
                 dead_letter_max_age_days: float = redis_contract.DEAD_LETTER_MAX_AGE_DAYS,
                 dead_letter_max_bytes: int = redis_contract.DEAD_LETTER_MAX_BYTES) -> None:
        self.redis, self.db, self.store = redis, db, store
        self.dead_letter_max_entries, self.dead_letter_max_age_days = dead_letter_max_entries, dead_letter_max_age_days
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.heartbeat_seconds = heartbeat_seconds
        self.fingerprint, self.max_bytes, self.backoff = fingerprint, max_bytes, backoff
        self.consumer_id = consumer_id or new_consumer_id()

    # -- the consumer's life ------------------------------------------------------------------------------------
    def consume(self, max_jobs: int) -> ConsumeReport:
        """Take up to ``max_jobs`` jobs, accept each into the ledger, acknowledge it; then write statuses."""
        report = ConsumeReport()
        redis_contract.set_aside_foreign_keys(self.redis)
        self._beat()
        self.redis.sadd(redis_contract.CONSUMERS, self.consumer_id)
        # a missed beat only risks a job taken twice, which is recognised
        beating = Beat(self._beat, self.heartbeat_seconds / 3, name="redis-heartbeat",
                       what=f"Redis consumer {self.consumer_id}").start()
        try:
            report.returned = self.return_abandoned()
            report.due = self.return_due()
            redis_contract.trim_dead_letters(self.redis, max_entries=self.dead_letter_max_entries,
                                             max_age_days=self.dead_letter_max_age_days,
                                             max_bytes=self.dead_letter_max_bytes)
            while report.taken < max_jobs:
                taken = self.take()
                if taken is None:
                    break
                report.taken += 1
                report.outcomes[self.handle(*taken)] += 1
            try:
                redis_contract.sync_statuses(self.db, self.redis)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                _log.warning("job statuses not written this round (%s); the next round writes them", exc)
        finally:
            beating.stop()
            self._leave()
        return report

    def _beat(self) -> None:
        self.redis.set(redis_contract.heartbeat(self.consumer_id), utc_timestamp(),
                       px=max(1, int(self.heartbeat_seconds * 1000)))

    def _leave(self) -> None:
        """Say goodbye if nothing is held (a job still held after a Redis error stays for the janitor).
        Runs in ``consume``'s ``finally``: a Redis that fails here too is left to the heartbeat's expiry, so
        the error that ended the round is the one raised, not this one."""
        from redis.exceptions import RedisError  # here: a command that never reaches a queue does not import redis

        try:
            held = sum(self.redis.llen(redis_contract.processing(self.consumer_id, p))
                       for p in redis_contract.PRIORITIES)
            if not held:
                self.redis.srem(redis_contract.CONSUMERS, self.consumer_id)
                self.redis.delete(redis_contract.heartbeat(self.consumer_id))
        except RedisError as exc:
            _log.warning("consumer %s could not leave (%s): its heartbeat expires instead", self.consumer_id, exc)

    # -- taking and acknowledging ---------------------------------------------------------------------------------
    def take(self) -> tuple[str, bytes] | None:
        for priority in redis_contract.PRIORITIES:
            raw = self.redis.lmove(redis_contract.queue(priority),
                                   redis_contract.processing(self.consumer_id, priority), "RIGHT", "LEFT")
            if raw is not None:
                failpoint("queue.taken")  # taken, nothing committed: the janitor must hand it back
                return priority, raw
        return None

    def ack(self, priority: str, raw: bytes) -> None:
        self.redis.lrem(redis_contract.processing(self.consumer_id, priority), 1, raw)

    def handle(self, priority: str, raw: bytes) -> str:
        """Turn one taken message into a ledger row (or a retry, a failure, a dead letter); the outcome."""
        try:
            job = parse_job(raw)
        except MalformedJob as exc:
            self.dead_letter(priority, raw, job_error("ERR_MALFORMED_MESSAGE", str(exc)))
            return "malformed"
        except Exception as exc:  # noqa: BLE001 - whatever a message makes the parser do is that message's fault
            _log.warning("a message the parser could not read is dead-lettered (%s)", type(exc).__name__)
            self.dead_letter(priority, raw, job_error("ERR_MALFORMED_MESSAGE",
                                                      f"unreadable message ({type(exc).__name__})"))
            return "malformed"
        try:
            intake = accept_job(self.db, self.store, job, fingerprint=self.fingerprint, max_bytes=self.max_bytes)
        except Exception as exc:  # noqa: BLE001 - every error is classified: retried, or failed and dead-lettered
            return self._after_error(priority, raw, job, from_exception(exc))
        if intake.outcome == REFUSED:
            redis_contract.write_status(self.redis, job.job_id, {**redis_contract.initial_status(job, "failed"),
                                                              **_error_fields(intake.error)}, final=True)
            self.dead_letter(priority, raw, intake.error, job)
        else:
            failpoint("queue.accepted")  # the ledger row committed, the message not yet acknowledged
            if intake.outcome == ACCEPTED and intake.job_status == "queued":
                redis_contract.write_status(self.redis, job.job_id, {**redis_contract.initial_status(job, "queued"),
                                                          "file_id": intake.file_id})
            elif intake.outcome == ALREADY and intake.job_status in ("queued", "processing"):
                # accepted before, and its status write may have died with the consumer (or with Redis)
                redis_contract.write_status(self.redis, job.job_id,
                                         {"status": intake.job_status, "file_id": intake.file_id})
            self.ack(priority, raw)  # the row is committed (or was already): the message may go
        return intake.outcome

    def _after_error(self, priority: str, raw: bytes, job: JobMessage, error: JobError) -> str:
        if error.recoverable and job.retry_count < job.max_retries:
            again = job.retried()
            delay = self.backoff[min(job.retry_count, len(self.backoff) - 1)]
            member = json.dumps({"queue": redis_contract.queue(priority), "message": again.to_json()})
            self.redis.eval(_DELAY_IF_HELD, 2, redis_contract.processing(self.consumer_id, priority),
                            redis_contract.DELAYED, raw, time.time() + delay, member)
            redis_contract.write_status(self.redis, job.job_id, {**redis_contract.initial_status(again, "submitted"),
                                                      **_error_fields(error)})
            return "retrying"
        if error.recoverable:
            error = JobError(error.code, f"{error.message} (after {job.retry_count} retries)", False,
                             error.suggestions)
        redis_contract.write_status(self.redis, job.job_id,
                                 {**redis_contract.initial_status(job, "failed"), **_error_fields(error)}, final=True)
        self.dead_letter(priority, raw, error, job)
        return "failed"

    def dead_letter(self, priority: str, raw: bytes, error: JobError, job: JobMessage | None = None) -> None:
        item = redis_contract.dead_letter_entry(raw, reason=error.message, error_code=error.code, priority=priority,
                                  job_id=job.job_id if job else None)
        self.redis.eval(MOVE_IF_HELD, 2, redis_contract.processing(self.consumer_id, priority),
                        redis_contract.DEAD_LETTER, raw, item, "LPUSH")
        self.redis.ltrim(redis_contract.DEAD_LETTER, 0, self.dead_letter_max_entries - 1)
        redis_contract.trim_to_bytes(self.redis, self.dead_letter_max_bytes)  # within the round, too

    # -- the janitor's part ---------------------------------------------------------------------------------------
    def return_abandoned(self, limit: int = 10_000) -> int:
        """Hand the jobs of consumers whose heartbeat expired back to their queues; how many. At most ``limit``
        consumers are looked at a round, in pipelined batches: the set can be planted with any number of ids."""
        returned, looked_at = 0, 0
        for batch in self._consumer_batches(limit):
            looked_at += len(batch)
            names = {m: redis_contract.consumer_name(m) for m in batch}
            # not an id a consumer writes (they are ASCII): nothing of ours to hand back
            foreign = [m for m, n in names.items() if n is None]
            if foreign:
                self.redis.srem(redis_contract.CONSUMERS, *foreign)
            others = [n for n in names.values() if n is not None and n != self.consumer_id]
            pipe = self.redis.pipeline(transaction=False)
            for consumer in others:
                pipe.exists(redis_contract.heartbeat(consumer))
            dead = [c for c, alive in zip(others, pipe.execute(), strict=True) if not alive]
            if dead:
                returned += int(self.redis.eval(_RETURN_HELD, 1 + len(redis_contract.PRIORITIES),
                                                redis_contract.CONSUMERS,
                                                *(redis_contract.queue(p) for p in redis_contract.PRIORITIES),
                                                *dead))
        return returned

    def _consumer_batches(self, limit: int, size: int = 500) -> Iterator[list]:
        cursor, seen = 0, 0
        while seen < limit:
            cursor, batch = self.redis.sscan(redis_contract.CONSUMERS, cursor, count=size)
            if batch:
                seen += len(batch)
                yield batch
            if cursor == 0:
                return

    def return_due(self) -> int:
        """Retries whose backoff has ended go back to the right end of their queue."""
        queues = [redis_contract.queue(p) for p in redis_contract.PRIORITIES]
        return int(self.redis.eval(_RETURN_DUE, 2 + len(queues), redis_contract.DELAYED, redis_contract.DEAD_LETTER,
                                   *queues, time.time(), utc_timestamp()))


def _error_fields(error: JobError | None) -> dict:
    if error is None:
        return {}
    return {"error": error.message, "error_code": error.code, "error_type": error.error_type,
            "suggestions": list(error.suggestions), "failed_at" if not error.recoverable else "last_error_at":
            utc_timestamp()}


# -- one round ---------------------------------------------------------------------------------------------------------
class RedisUnavailable(RuntimeError):
    """REDIS_URL names a server that does not answer."""


@dataclass
class RedisRound:
    report: ConsumeReport
    depths: dict

    def summary(self) -> str:
        taken = ", ".join(f"{n} {what}" for what, n in sorted(self.report.outcomes.items()))
        return (f"took {self.report.taken} job(s){': ' + taken if taken else ''}; "
                f"{redis_contract.depths_summary(self.depths)}")


def open_queue(settings: Settings):
    """The Redis client of the job queue, or None when there is none (see the module's note)."""
    if settings.queues.redis_url is None:
        return None
    if redis_contract.reachable(settings.queues.redis_url):
        return redis_contract.connect(settings.queues.redis_url)
    if settings.queues.redis_configured:
        raise RedisUnavailable(f"Redis at {redis_contract.describe(settings.queues.redis_url)} does not answer "
                               "(REDIS_URL); jobs stay on the queue until it does")
    return None


def take_jobs(client, db: Database, store: UploadStore, settings: Settings, *, fingerprint: str,
              max_jobs: int | None = None) -> RedisRound:
    consumer = RedisJobConsumer(client, db, store, fingerprint=fingerprint, max_bytes=settings.upload.max_bytes,
                                backoff=settings.reliability.retry_backoff_seconds or (5.0,),
                                heartbeat_seconds=settings.queues.consumer_heartbeat_seconds,
                                dead_letter_max_entries=settings.queues.dead_letter_max_entries,
                                dead_letter_max_age_days=settings.queues.dead_letter_max_age_days,
                                dead_letter_max_bytes=settings.queues.dead_letter_max_bytes)
    report = consumer.consume(max_jobs or settings.queues.jobs_per_tick)
    return RedisRound(report, redis_contract.depths(client))


@contextmanager
def following_statuses(client, db: Database, interval: float = 2.0) -> Iterator[None]:
    """While the block runs (`process` running batches), write job statuses as the ledger moves, every
    ``interval`` seconds; once more at the end."""
    stop = threading.Event()

    def follow() -> None:
        while not stop.wait(interval):
            # a missed sync is repeated at the next interval and at the end
            with contextlib.suppress(Exception):
                redis_contract.sync_statuses(db, client)

    thread = threading.Thread(target=follow, daemon=True, name="redis-job-status")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        redis_contract.sync_statuses(db, client)


# -- dead letters of every queue ---------------------------------------------------------------------------------------
def dead_letter_depths(settings: Settings) -> dict[str, int]:
    depths: dict[str, int] = {}
    try:
        client = open_queue(settings)
    except RedisUnavailable:
        client = None
    if client is not None:
        try:
            depths[redis_contract.DEAD_LETTER] = redis_contract.dead_letter_count(client)
        finally:
            client.close()
    if settings.queues.sqs_queue_urls:
        from ingestion_pipeline.queues.sqs import dead_letter_depth, sqs_client

        sqs = sqs_client()
        for url in settings.queues.sqs_queue_urls:
            name, depth = dead_letter_depth(sqs, url)
            if name is not None:
                depths[name] = depth
    return depths
