"""The Redis job queue's contract, as producers and consumers in any service see it.

**Keys** (the names are the contract: producers in other services use them): the queues per priority, the
dead-letter list, the delayed set, each job's status hash, each consumer's processing lists and heartbeat.

**Connection**: redis-py with its own retry policy (exponential backoff on a lost connection), bytes in and
out (a message that is not UTF-8 must still be acknowledged byte for byte).

**Statuses**: the hash ``rag:ingest:job:<job_id>`` is written by the producer (``submitted``), the consumer
(``queued`` or ``failed`` at intake) and ``sync_statuses``, which follows each job's file through the ledger
(``processing`` while a run holds it, then ``done`` or ``failed``) - read from the ledger, never guessed. A
finished job's hash expires 7 days after completion; its file is moved (``settling.settle``) before the job is
marked reported, so a crash in between only repeats the move's check.

**Producing** (``queue push``, and how another service does the same): the job's status hash
(``submitted``) and the ``LPUSH`` of its message in one Redis transaction, so a job on the queue always has a
status to read.

**Depths**: how much the queues hold (per priority, waiting out a retry, held by consumers, dead-lettered)
and which consumers are alive (``queue status``, the sensor's tick message, the dead-letter asset check).

**Dead letters** (``rag:ingest:queue:dead-letter``): messages that could not become a job, with why. Each entry is
JSON: ``reason``, ``error_code``, ``dead_lettered_at``, ``priority``, ``job_id`` (when the message had one) and
``message`` (the message exactly as it arrived, when it is within the 64 KiB a job may be, or ``message_base64``
when JSON would enlarge it; a larger one keeps its first 2 KiB, with ``truncated``, ``message_bytes`` and
``message_sha256``, and is never replayed: it would be refused again). Entries are read back as untrusted
(``read_dead_letter``): anything that can write to Redis can write one. ``replay_dead_letters`` puts messages back
on their queue (a job's ``retry_count`` starts again at 0), each move one Redis transaction. The list keeps the
newest ``INGESTION_DEAD_LETTER_MAX_ENTRIES`` (10,000) entries, none older than
``INGESTION_DEAD_LETTER_MAX_AGE_DAYS`` (30) and at most ``INGESTION_DEAD_LETTER_MAX_BYTES``: a producer that sends
garbage fills a bounded list, not Redis's memory.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.queues import jobs, rag_registry, settling
from ingestion_pipeline.queues.jobs import (
    NON_RECOVERABLE,
    RECOVERABLE,
    SUGGESTIONS,
    JobMessage,
    MalformedJob,
    err_code,
    parse_job,
    utc_timestamp,
)

if TYPE_CHECKING:
    import redis

_log = logging.getLogger(__name__)

# -- keys --------------------------------------------------------------------------------------------------------------
QUEUE = "rag:ingest:queue"  # the normal priority: producers LPUSH, the consumer takes from the right
PRIORITIES = ("high", "normal", "low")  # taken in this order
DEAD_LETTER = "rag:ingest:queue:dead-letter"
DELAYED = "rag:ingest:queue:delayed"  # a sorted set: jobs waiting out a retry backoff, scored by when they are due
CONSUMERS = "rag:ingest:consumers"  # a set of consumer ids that may hold processing lists
STATUS_TTL_SECONDS = 7 * 24 * 3600  # a finished job's status hash expires 7 days after completion
DEAD_LETTER_MAX_ENTRIES = 10_000  # the settings' defaults (core/settings.py QueueSettings)
DEAD_LETTER_MAX_AGE_DAYS = 30
DEAD_LETTER_MAX_BYTES = 64 * 1024 * 1024
DEAD_LETTER_EXCERPT_BYTES = 2048  # what a dead letter keeps of a message over the size a job may be


def queue(priority: str = "normal") -> str:
    if priority not in PRIORITIES:
        raise ValueError(f"unknown priority {priority!r}: one of {', '.join(PRIORITIES)}")
    return QUEUE if priority == "normal" else f"{QUEUE}:{priority}"


def processing(consumer_id: str, priority: str) -> str:
    """The consumer's list of jobs taken from ``priority`` and not yet acknowledged."""
    return f"rag:ingest:processing:{consumer_id}:{priority}"


def heartbeat(consumer_id: str) -> str:
    """Exists (with a short expiry) while the consumer is alive."""
    return f"rag:ingest:consumer:{consumer_id}"


def status(job_id: str) -> str:
    return f"rag:ingest:job:{job_id}"


# -- connection --------------------------------------------------------------------------------------------------------
def connect(url: str) -> redis.Redis:
    # redis-py is imported where a connection is made: `submit` and the other commands that never reach the
    # queue import the CLI's queue module without it (its import is a cost of each: benchmarks/dev_latency.py)
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), 3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def reachable(url: str) -> bool:
    """One PING without retries: a machine with no Redis learns it in a millisecond, not after the backoff
    (the retrying client waited out its whole backoff on a closed port)."""
    import redis

    probe = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, retry=None)
    try:
        return bool(probe.ping())
    except redis.RedisError:
        return False
    finally:
        probe.close()


def describe(url: str) -> str:
    """The URL without a password, for messages."""
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://…@{rest.split('@', 1)[1]}"


# -- statuses ----------------------------------------------------------------------------------------------------------
STATUS_FIELDS = ("job_id", "rag_id", "filename", "status", "submitted_at", "started_at", "completed_at", "failed_at",
          "duration_seconds", "chunks_created", "embeddings_generated", "tokens_used", "error", "error_type",
          "error_code", "retry_count", "max_retries", "suggestions")


def status_field_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return utc_timestamp(value)
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return str(value)


def write_status(redis, job_id: str, values: dict[str, Any], *, final: bool = False) -> None:
    """Set fields of the job's hash; a final status starts its 7-day expiry."""
    from redis.exceptions import ResponseError  # here: a client exists, so redis-py is installed

    key = status(job_id)
    for attempt in (1, 2):
        pipe = redis.pipeline(transaction=True)
        pipe.hset(key, mapping={name: status_field_text(v) for name, v in values.items()})
        if final:
            pipe.expire(key, STATUS_TTL_SECONDS)
        else:  # a replayed job that had failed is alive again
            pipe.persist(key)
        try:
            pipe.execute()
            return
        except ResponseError as exc:
            # the key planted with another type (a producer writes these keys too): it is this job's record,
            # so it is replaced, never left to fail every round that writes the job's status
            if "WRONGTYPE" not in str(exc) or attempt == 2:
                raise
            redis.delete(key)


def initial_status(job: JobMessage, status: str) -> dict[str, Any]:
    """Every field of a new hash (those not known yet empty)."""
    return {**dict.fromkeys(STATUS_FIELDS), "job_id": job.job_id, "rag_id": job.rag_id, "filename": job.filename,
            "status": status, "submitted_at": job.submitted_at, "retry_count": job.retry_count,
            "max_retries": job.max_retries}


def read_status(redis, job_id: str) -> dict[str, str]:
    """The job's status hash; bytes that are not UTF-8 (a producer wrote them) read as replacement characters."""
    from redis.exceptions import ResponseError

    try:
        fields = redis.hgetall(status(job_id))
    except ResponseError:  # not a hash: no status this code wrote
        return {}
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in fields.items()}


# The contract's own keys and their types: one planted with another type (anything that can write to Redis can)
# would fail every command on it, every round, for every tenant.
def _own_keys() -> dict[str, str]:
    return {**{queue(p): "list" for p in PRIORITIES}, DEAD_LETTER: "list", DELAYED: "zset", CONSUMERS: "set"}


def set_aside_foreign_keys(redis) -> list[str]:
    """Rename aside each of the contract's keys that holds another type (kept for whoever looks, logged), so
    that the round runs; the names they went to."""
    keys = _own_keys()
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    moved = []
    for (key, kind), found in zip(keys.items(), pipe.execute(), strict=True):
        found = found.decode() if isinstance(found, bytes) else found
        if found not in ("none", kind):
            aside = f"{key}:unreadable:{utc_timestamp()}"
            redis.rename(key, aside)
            _log.error("Redis key %s held a %s, not a %s: renamed to %s", key, found, kind, aside)
            moved.append(aside)
    return moved


def consumer_name(member: bytes | str) -> str | None:
    """A member of the consumers set as the id a consumer wrote, or None when it cannot be one (not UTF-8)."""
    if isinstance(member, str):
        return member
    try:
        return member.decode()
    except UnicodeDecodeError:
        return None


def _status_values(row: dict) -> dict[str, Any]:
    """The hash fields the job's ledger state gives."""
    status = row["now_status"]
    message = row["message"]
    attempts = row["attempts"] or 0
    # retries begun or scheduled: a queued file with attempts behind it waits out the backoff of its next one
    retries = attempts if row["file_status"] == "queued" else max(attempts - 1, 0)
    values: dict[str, Any] = {"status": status, "retry_count": message.get("retry_count", 0) + retries}
    if row["file_started_at"] is not None:
        values["started_at"] = row["file_started_at"]
    if row["file_status"] == "queued" and attempts and row["file_error_code"]:  # the last attempt's error
        values.update(error=f"{row['file_error_code']}: {row['file_error']}",
                      error_code=err_code(row["file_error_code"]), error_type=RECOVERABLE)
    if status == jobs.DONE:
        stats = row["file_stats"] or {}
        finished = row["file_finished_at"] or row["finished_at"]
        values.update(error=None, error_code=None, error_type=None, suggestions=None)  # a retry's error is over
        values.update(completed_at=finished, chunks_created=stats.get("chunks", 0),
                      embeddings_generated=stats.get("chunks", 0), tokens_used=stats.get("tokens", 0))
        if row["file_started_at"] is not None and finished is not None:
            values["duration_seconds"] = round((finished - row["file_started_at"]).total_seconds(), 3)
    elif status == jobs.FAILED:
        outcome = row["outcome"] or {}
        if row["file_id"] is None:  # refused at intake
            code, error, suggestions, kind = (outcome.get("error_code"), outcome.get("error"),
                                              outcome.get("suggestions", []), NON_RECOVERABLE)
        else:
            code = err_code(row["file_error_code"])
            error = f"{row['file_error_code']}: {row['file_error']}" if row["file_error_code"] else row["file_error"]
            suggestions = [*SUGGESTIONS.get(code, ()), *([row["file_suggestion"]] if row["file_suggestion"] else [])]
            kind = RECOVERABLE if row["file_status"] == "dead_letter" else NON_RECOVERABLE
        values.update(failed_at=row["file_finished_at"] or row["finished_at"], error=error, error_code=code,
                      error_type=kind, suggestions=suggestions)
    return values


def sync_statuses(db: Database, redis, *, limit: int = 1000) -> dict[str, int]:
    """Write every unreported job's status as its file's ledger state says; settle finished jobs' files.
    Returns how many jobs moved to each status."""
    moved: dict[str, int] = {}
    with db.connection() as conn:
        rows = jobs.unreported(conn, "redis", limit)
        # a file is settled from its rag's root as registered now: a rag removed since leaves its files be
        roots = {rag.rag_id: rag.root for rag in rag_registry.list_rags(conn)} if rows else {}
    for row in rows:
        status = row["now_status"]
        final = status in (jobs.DONE, jobs.FAILED)
        if status == row["status"] and not final:
            continue
        values = _status_values(row)
        if final:
            failure = None
            if status == jobs.FAILED:
                failure = {"job_id": row["job_id"], "rag_id": row["rag_id"], "filename": row["filename"],
                           "source_path": row["source_path"], "file_id": row["file_id"],
                           **{k: status_field_text(values.get(k))
                              for k in ("error", "error_code", "error_type", "failed_at")},
                           "suggestions": values.get("suggestions", []), "retry_count": values["retry_count"]}
            moved_to = settling.settle(row["source_path"], status, row["job_id"], failure,
                                       root=roots.get(row["rag_id"]))
            if moved_to is not None:
                values["moved_to"] = str(moved_to)
        write_status(redis, row["job_id"], values, final=final)
        with db.transaction() as conn:
            jobs.advance(conn, row["job_id"], status, tenant_id=row["tenant_id"], reported=final)
        moved[status] = moved.get(status, 0) + 1
    return moved


class FinalStatusWriter:
    """Writes ``done`` or ``failed`` into the status hashes of the Redis jobs of files that just finished, from
    the run that finished them (``StepRunner.finish_listeners``), so a producer polling the hash sees it within a
    second of the promotion rather than at the consumer's next round. Settling the job's file (``processed/``,
    ``failed/``: the consumer's host has the folder) and marking the job reported stay with the consumer's
    round, which writes the hash again with ``moved_to``. Files of no Redis job cost one indexed query and no
    connection to Redis."""

    def __init__(self, db: Database, url: str) -> None:
        self._db, self._url = db, url
        self._client: redis.Redis | None = None

    def __call__(self, file_ids: list[int]) -> None:
        with self._db.connection() as conn:
            rows = [r for r in jobs.unreported(conn, "redis", 10 * len(file_ids) + 10, file_ids=file_ids)
                    if r["now_status"] in (jobs.DONE, jobs.FAILED)]
        if not rows:
            return
        if self._client is None:
            self._client = connect(self._url)
        for row in rows:
            write_status(self._client, row["job_id"], _status_values(row), final=True)
            with self._db.transaction() as conn:
                jobs.advance(conn, row["job_id"], row["now_status"], tenant_id=row["tenant_id"], reported=False)


# -- producing ---------------------------------------------------------------------------------------------------------
def push(redis, job: JobMessage, priority: str = "normal") -> None:
    values = initial_status(job, "submitted")
    pipe = redis.pipeline(transaction=True)
    pipe.hset(status(job.job_id), mapping={k: status_field_text(v) for k, v in values.items()})
    pipe.lpush(queue(priority), job.to_json())
    pipe.execute()


# -- depths ------------------------------------------------------------------------------------------------------------
CONSUMERS_SHOWN = 1000  # consumers ``depths`` reads one by one; the rest are counted (a set can be planted)


def depths(redis) -> dict:
    """What the queues hold and who holds it, read only (a sensor's tick and ``queue status`` ask): a key of the
    contract's that holds another type counts as empty here, and the intake's next round sets it aside
    (``set_aside_foreign_keys``)."""
    pipe = redis.pipeline(transaction=False)
    for p in PRIORITIES:
        pipe.llen(queue(p))
    pipe.zcard(DELAYED)
    pipe.llen(DEAD_LETTER)
    pipe.scard(CONSUMERS)
    pipe.srandmember(CONSUMERS, CONSUMERS_SHOWN)
    # raise_on_error=False: a key planted with another type (WRONGTYPE) is an answer of its own, not the end
    *queued, retrying, dead, total, members = [None if isinstance(v, Exception) else v
                                               for v in pipe.execute(raise_on_error=False)]
    names = sorted(n for n in (consumer_name(m) for m in members or []) if n is not None)
    pipe = redis.pipeline(transaction=False)
    for consumer in names:
        pipe.get(heartbeat(consumer))
        for p in PRIORITIES:
            pipe.llen(processing(consumer, p))
    answers = iter(pipe.execute(raise_on_error=False))
    consumers = []
    for consumer in names:
        beat, *held = (next(answers) for _ in range(1 + len(PRIORITIES)))
        if isinstance(beat, Exception) or any(isinstance(h, Exception) for h in held):
            continue  # a key planted with another type: not a consumer's
        consumers.append({"consumer": consumer, "alive": beat is not None,
                          "heartbeat": beat.decode(errors="replace") if beat else None, "holding": sum(held)})
    return {**{p: n or 0 for p, n in zip(PRIORITIES, queued, strict=True)},
            "retrying": retrying or 0, "processing": sum(c["holding"] for c in consumers),
            "dead_letter": dead or 0, "consumers": consumers, "consumers_total": total or 0}


def depths_summary(d: dict) -> str:
    alive = sum(c["alive"] for c in d["consumers"])
    return (f"queue high {d['high']} / normal {d['normal']} / low {d['low']}, retrying {d['retrying']}, "
            f"processing {d['processing']}, dead letters {d['dead_letter']}; consumers {alive} alive")


# -- dead letters ------------------------------------------------------------------------------------------------------
# Remove ARGV[1] from KEYS[1] and, only if it was there, push ARGV[2] onto KEYS[2] (ARGV[3]: LPUSH or RPUSH), in
# one step: two processes replaying (or a consumer and the janitor) never both move one message.
MOVE_IF_HELD = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call(ARGV[3], KEYS[2], ARGV[2])
  return 1
end
return 0
"""


def dead_letter_entry(raw: bytes, *, reason: str, error_code: str, priority: str, job_id: str | None = None) -> bytes:
    entry: dict[str, Any] = {"reason": reason[:1000], "error_code": error_code, "dead_lettered_at": utc_timestamp(),
                             "priority": priority, "job_id": job_id}
    if len(raw) <= jobs.MAX_MESSAGE_BYTES:
        entry.update(_message_fields(raw))
    else:
        entry.update(_message_fields(raw[:DEAD_LETTER_EXCERPT_BYTES]), truncated=True, message_bytes=len(raw),
                     message_sha256=hashlib.sha256(raw).hexdigest())
    return json.dumps(entry, ensure_ascii=False).encode()


def _message_fields(raw: bytes) -> dict[str, str]:
    """The message as text when JSON keeps it near its size, else as base64: escaped control characters or
    bytes that are not UTF-8 would make an entry up to six times the message (``\\u0001`` for one byte)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and len(json.dumps(text, ensure_ascii=False).encode()) <= len(raw) * 4 // 3 + 64:
        return {"message": text}
    return {"message_base64": base64.b64encode(raw).decode()}


@dataclass(frozen=True)
class DeadLetter:
    """One entry of the list as read back: every field checked, since anything that can write to Redis can
    write to the list. An entry that is not one this code wrote is ``readable=False``, listed with what it
    holds, never replayed, and trimmed by count and bytes like the others."""

    raw: bytes
    readable: bool
    reason: str
    error_code: str
    dead_lettered_at: datetime | None
    priority: str
    job_id: str | None
    message: bytes | None  # None: not kept whole (truncated) or unreadable

    def as_dict(self) -> dict[str, Any]:
        return {"dead_lettered_at": self.dead_lettered_at.isoformat() if self.dead_lettered_at else None,
                "job_id": self.job_id, "error_code": self.error_code, "reason": self.reason,
                "priority": self.priority, "readable": self.readable, "replayable": self.message is not None,
                "message": (self.message.decode("utf-8", errors="backslashreplace")[:DEAD_LETTER_EXCERPT_BYTES]
                            if self.message is not None else None)}


def read_dead_letter(raw: bytes) -> DeadLetter:
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError):  # deep nesting exhausts the parser's stack: one bad entry, not a crash
        item = None
    if not isinstance(item, dict):
        return DeadLetter(raw, False, f"not a dead-letter entry: {raw[:200]!r}", "unreadable_entry", None,
                          "normal", None, None)
    reason, code, job_id = item.get("reason"), item.get("error_code"), item.get("job_id")
    priority = item.get("priority") if item.get("priority") in PRIORITIES else "normal"
    message: bytes | None = None
    if not item.get("truncated"):
        try:
            if isinstance(item.get("message_base64"), str):
                message = base64.b64decode(item["message_base64"], validate=True)
            elif isinstance(item.get("message"), str):
                message = item["message"].encode("utf-8", errors="surrogateescape")
        except (ValueError, UnicodeEncodeError):
            message = None
    readable = isinstance(reason, str) and isinstance(code, str) and (job_id is None or isinstance(job_id, str))
    return DeadLetter(raw, readable, reason if isinstance(reason, str) else "(no reason recorded)",
                      code if isinstance(code, str) else "unreadable_entry", _when(item.get("dead_lettered_at")),
                      priority, job_id if isinstance(job_id, str) else None, message if readable else None)


def _when(value: Any) -> datetime | None:
    """An entry's time, or None when it has none to keep it by; a time without a zone is taken as UTC (it
    compares with the cutoff instead of raising)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def trim_dead_letters(redis, *, max_entries: int = DEAD_LETTER_MAX_ENTRIES,
                      max_age_days: float = DEAD_LETTER_MAX_AGE_DAYS,
                      max_bytes: int = DEAD_LETTER_MAX_BYTES) -> int:
    """Drop the entries beyond the newest ``max_entries``, those older than ``max_age_days`` and the oldest
    while the list holds more than ``max_bytes`` (the list is newest first, so the old ones are at its end);
    how many were dropped."""
    before = redis.llen(DEAD_LETTER)
    redis.ltrim(DEAD_LETTER, 0, max_entries - 1)
    trim_to_bytes(redis, max_bytes)
    cutoff = datetime.now(UTC) - timedelta(days=max_age_days)
    while (oldest := redis.lindex(DEAD_LETTER, -1)) is not None:
        when = read_dead_letter(oldest).dead_lettered_at
        if when is not None and when >= cutoff:
            break
        redis.lrem(DEAD_LETTER, -1, oldest)
    return max(0, before - redis.llen(DEAD_LETTER))


def trim_to_bytes(redis, max_bytes: int) -> None:
    """Keep the newest entries whose bytes fit ``max_bytes``: the list is read from the newest in pages, so a
    list within its bound costs one pass of reads and no write."""
    # Redis's own count of every node (samples=0: an estimate from the newest nodes could be steered by a
    # producer), at least the entries' bytes
    if (redis.memory_usage(DEAD_LETTER, samples=0) or 0) <= max_bytes:
        return
    kept_bytes, index, page = 0, 0, 200
    while entries := redis.lrange(DEAD_LETTER, index, index + page - 1):
        for offset, entry in enumerate(entries):
            kept_bytes += len(entry)
            if kept_bytes > max_bytes:
                if index + offset == 0:
                    redis.delete(DEAD_LETTER)  # the newest alone is over: LTRIM 0 -1 would keep them all
                else:
                    redis.ltrim(DEAD_LETTER, 0, index + offset - 1)
                return
        index += page


def list_dead_letters(redis, limit: int = 100) -> list[dict]:
    """The newest ``limit`` entries, newest first; none when the key holds another type (read only: the
    intake's next round sets it aside)."""
    from redis.exceptions import ResponseError

    try:
        entries = redis.lrange(DEAD_LETTER, 0, limit - 1)
    except ResponseError:
        return []
    return [read_dead_letter(e).as_dict() for e in entries]


def dead_letter_count(redis) -> int:
    from redis.exceptions import ResponseError

    try:
        return redis.llen(DEAD_LETTER)
    except ResponseError:  # another type: no dead letters this code wrote
        return 0


def replay_dead_letters(redis, *, job_ids: set[str] | None = None, limit: int = 1000) -> list[dict]:
    """Move dead letters (all, or those of ``job_ids``) back to their queue; the entries moved. An entry
    without its whole message (truncated, or not one this code wrote) stays."""
    set_aside_foreign_keys(redis)
    moved = []
    for raw_entry in redis.lrange(DEAD_LETTER, 0, limit - 1):
        item = read_dead_letter(raw_entry)
        if item.message is None or (job_ids is not None and item.job_id not in job_ids):
            continue
        message = item.message
        try:
            job = parse_job(message)
            message = type(job)(**{**job.__dict__, "retry_count": 0}).to_json().encode()
        except MalformedJob:
            pass  # replayed as it was: a fixed consumer may read it now, or it comes back here with its reason
        if redis.eval(MOVE_IF_HELD, 2, DEAD_LETTER, queue(item.priority), raw_entry, message, "LPUSH"):
            moved.append(item.as_dict())
    return moved
