"""The Redis connection of the job queue: redis-py with its own retry policy (exponential backoff on a lost
connection), bytes in and out (a message that is not UTF-8 must still be acknowledged byte for byte)."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), 3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def reachable(url: str) -> bool:
    """One PING without retries: a machine with no Redis learns it in a millisecond, not after the backoff
    (the retrying client took 1.4 s to give up on a closed port)."""
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
