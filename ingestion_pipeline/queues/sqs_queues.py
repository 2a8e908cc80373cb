"""SQS plumbing: the client, a queue's dead-letter queue (from its redrive policy), and moving dead letters
back (``replay``). Receiving and acknowledging is ``sqs_intake``."""

from __future__ import annotations

import json
from typing import Any

from ingestion_pipeline.core.s3_clients import build_sqs_client


def sqs_client() -> Any:
    return build_sqs_client()


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def dead_letter_url(sqs: Any, url: str) -> str | None:
    """The URL of the queue's dead-letter queue, or None when it has no redrive policy."""
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"]).get("Attributes", {})
    policy = attributes.get("RedrivePolicy")
    if not policy:
        return None
    arn = json.loads(policy)["deadLetterTargetArn"]
    return sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]


def depth(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])
    values = attributes.get("Attributes", {})
    return sum(int(values.get(name, 0)) for name in ("ApproximateNumberOfMessages",
                                                      "ApproximateNumberOfMessagesNotVisible"))


def dead_letter_depth(sqs: Any, url: str) -> tuple[str | None, int]:
    """(the dead-letter queue's name, how many messages it holds); (None, 0) without a redrive policy."""
    dead = dead_letter_url(sqs, url)
    return (None, 0) if dead is None else (f"sqs:{queue_name(dead)}", depth(sqs, dead))


def list_dead_letters(sqs: Any, url: str, limit: int = 100) -> list[dict]:
    """A look at the dead letters without taking them (received with a zero visibility timeout)."""
    dead = dead_letter_url(sqs, url)
    if dead is None:
        raise ValueError(f"queue {queue_name(url)} has no dead-letter queue (no redrive policy)")
    seen: dict[str, dict] = {}
    for _ in range(max(1, limit // 10)):
        messages = sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                       AttributeNames=["ApproximateReceiveCount"]).get("Messages", [])
        if not messages:
            break
        for m in messages:
            seen.setdefault(m["MessageId"], {"message_id": m["MessageId"], "body": m["Body"][:500],
                                             "receives": m.get("Attributes", {}).get("ApproximateReceiveCount")})
    return list(seen.values())[:limit]


def replay_dead_letters(sqs: Any, url: str, limit: int = 1000) -> int:
    """Move dead letters back to ``url``: each sent again, then deleted from the dead-letter queue."""
    dead = dead_letter_url(sqs, url)
    if dead is None:
        raise ValueError(f"queue {queue_name(url)} has no dead-letter queue (no redrive policy)")
    moved = 0
    while moved < limit:
        messages = sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10, VisibilityTimeout=60).get("Messages", [])
        if not messages:
            return moved
        for m in messages:
            sqs.send_message(QueueUrl=url, MessageBody=m["Body"])
            sqs.delete_message(QueueUrl=dead, ReceiptHandle=m["ReceiptHandle"])
            moved += 1
    return moved
