"""The Redis key names of the job contract (names are part of the contract: producers in other services use them)."""

from __future__ import annotations

QUEUE = "rag:ingest:queue"  # the normal priority: producers LPUSH, the consumer takes from the right
PRIORITIES = ("high", "normal", "low")  # taken in this order
DEAD_LETTER = "rag:ingest:queue:dead-letter"
DELAYED = "rag:ingest:queue:delayed"  # a sorted set: jobs waiting out a retry backoff, scored by when they are due
CONSUMERS = "rag:ingest:consumers"  # a set of consumer ids that may hold processing lists
STATUS_TTL_SECONDS = 7 * 24 * 3600  # a finished job's status hash expires 7 days after completion


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
