"""How much the Redis queues hold: per priority, waiting out a retry, held by consumers, dead-lettered; and
which consumers are alive (``queue status``, the sensor's tick message, the dead-letter asset check)."""

from __future__ import annotations

from ingestion_pipeline.queues import redis_keys


def depths(redis) -> dict:
    consumers = []
    for member in sorted(redis.smembers(redis_keys.CONSUMERS)):
        consumer = member.decode()
        beat = redis.get(redis_keys.heartbeat(consumer))
        holding = sum(redis.llen(redis_keys.processing(consumer, p)) for p in redis_keys.PRIORITIES)
        consumers.append({"consumer": consumer, "alive": beat is not None,
                          "heartbeat": beat.decode() if beat else None, "holding": holding})
    return {**{p: redis.llen(redis_keys.queue(p)) for p in redis_keys.PRIORITIES},
            "retrying": redis.zcard(redis_keys.DELAYED), "processing": sum(c["holding"] for c in consumers),
            "dead_letter": redis.llen(redis_keys.DEAD_LETTER), "consumers": consumers}


def summary(d: dict) -> str:
    alive = sum(c["alive"] for c in d["consumers"])
    return (f"queue high {d['high']} / normal {d['normal']} / low {d['low']}, retrying {d['retrying']}, "
            f"processing {d['processing']}, dead letters {d['dead_letter']}; consumers {alive} alive")
