"""The dead-letter list ``rag:ingest:queue:dead-letter``: messages that could not become a job, with why.

Each entry is JSON: ``reason``, ``error_code``, ``dead_lettered_at``, ``priority``, ``job_id`` (when the
message had one) and ``message`` (the message exactly as it arrived). ``replay`` puts messages back on
their queue (a job's ``retry_count`` starts again at 0), each move one Redis transaction.
"""

from __future__ import annotations

import json

from ingestion_pipeline.queues import redis_keys
from ingestion_pipeline.queues.job_messages import MalformedJob, parse_job, utc_timestamp

# Remove ARGV[1] from KEYS[1] and, only if it was there, push ARGV[2] onto KEYS[2] (ARGV[3]: LPUSH or RPUSH), in
# one step: two processes replaying (or a consumer and the janitor) never both move one message.
MOVE_IF_HELD = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call(ARGV[3], KEYS[2], ARGV[2])
  return 1
end
return 0
"""


def entry(raw: bytes, *, reason: str, error_code: str, priority: str, job_id: str | None = None) -> bytes:
    return json.dumps({"reason": reason, "error_code": error_code, "dead_lettered_at": utc_timestamp(),
                       "priority": priority, "job_id": job_id,
                       "message": raw.decode("utf-8", errors="backslashreplace")}).encode()


def list_entries(redis, limit: int = 100) -> list[dict]:
    """The newest ``limit`` entries, newest first."""
    return [json.loads(e) for e in redis.lrange(redis_keys.DEAD_LETTER, 0, limit - 1)]


def depth(redis) -> int:
    return redis.llen(redis_keys.DEAD_LETTER)


def replay(redis, *, job_ids: set[str] | None = None, limit: int = 1000) -> list[dict]:
    """Move dead letters (all, or those of ``job_ids``) back to their queue; the entries moved."""
    moved = []
    for raw_entry in redis.lrange(redis_keys.DEAD_LETTER, 0, limit - 1):
        item = json.loads(raw_entry)
        if job_ids is not None and item.get("job_id") not in job_ids:
            continue
        message = item["message"].encode()
        try:
            job = parse_job(message)
            message = type(job)(**{**job.__dict__, "retry_count": 0}).to_json().encode()
        except MalformedJob:
            pass  # replayed as it was: a fixed consumer may read it now, or it comes back here with its reason
        if redis.eval(MOVE_IF_HELD, 2, redis_keys.DEAD_LETTER, redis_keys.queue(item.get("priority") or "normal"),
                      raw_entry, message, "LPUSH"):
            moved.append(item)
    return moved
