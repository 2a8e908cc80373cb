"""One bounded round on one SQS queue: receive (long polling), apply each message to the ledger, delete it only
after that commits.

A message is S3 event notifications of a watched bucket (``s3_events``) or a job (``sqs_jobs``). One that
cannot be applied now - malformed, or an error of S3 or the database - is not deleted: its visibility
timeout is set to the retry backoff (5 s, 10 s, 30 s by its receive count) and the queue's redrive policy
moves it to the dead-letter queue after its ``maxReceiveCount`` receives (3 in the docs' setup). A message
is applied and deleted within a second or two, so no visibility extension is needed beyond the one a job
takes before it streams its object (5 minutes).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.queues import job_records, s3_events, sqs_jobs
from ingestion_pipeline.queues.job_messages import MalformedJob
from ingestion_pipeline.queues.sqs_queues import dead_letter_depth, depth, queue_name
from ingestion_pipeline.sources.metric_intake import s3_metric_intake
from ingestion_pipeline.sources.registry import Source

_log = logging.getLogger("ingestion_pipeline.queues")
DONE = {"applied", "stale", s3_events.UNWATCHED, s3_events.TEST_EVENT, "accepted", "already accepted", "failed"}
JOB_VISIBILITY_SECONDS = 300


@dataclass
class SqsRound:
    queue: str
    received: int = 0
    outcomes: Counter = field(default_factory=Counter)
    waiting: int = 0
    dead_letters: int = 0

    def summary(self) -> str:
        seen = ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes.items()))
        return (f"sqs {self.queue}: received {self.received}{': ' + seen if seen else ''}; {self.waiting} waiting, "
                f"{self.dead_letters} dead letters")


class SqsIntake:
    def __init__(self, sqs: Any, db: Database, settings: Settings, *, document_store: UploadStore,
                 metric_store: UploadStore, s3_client_for: Any, fingerprint: str) -> None:
        self.sqs, self.db, self.settings = sqs, db, settings
        self.document_store, self.metric_store = document_store, metric_store
        self.s3_client_for, self.fingerprint = s3_client_for, fingerprint
        self.backoff = settings.reliability.retry_backoff_seconds or (5.0,)

    def poll(self, url: str) -> SqsRound:
        result = SqsRound(queue_name(url))
        budget = self.settings.queues.sqs_messages_per_tick
        seen: set[str] = set()  # a message back within the round (its backoff was shorter) waits for the next one
        while result.received < budget:
            messages = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=min(10, budget - result.received),
                WaitTimeSeconds=self.settings.queues.sqs_wait_seconds,
                AttributeNames=["ApproximateReceiveCount"]).get("Messages", [])
            if not messages or any(m["MessageId"] in seen for m in messages):
                for m in messages:
                    self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                                       VisibilityTimeout=0)
                break
            for message in messages:
                seen.add(message["MessageId"])
                result.received += 1
                outcome = self.handle(url, message)
                result.outcomes[outcome] += 1
                if outcome in DONE:  # committed (or nothing to commit): the message may go
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                else:
                    receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
                    delay = self.backoff[min(receives - 1, len(self.backoff) - 1)]
                    self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"],
                                                       VisibilityTimeout=int(delay))
        with self.db.transaction() as conn:
            job_records.follow_ledger(conn, "sqs")
        result.waiting = depth(self.sqs, url)
        result.dead_letters = dead_letter_depth(self.sqs, url)[1]
        return result

    def handle(self, url: str, message: dict) -> str:
        try:
            body = json.loads(message["Body"])
            if not isinstance(body, dict):
                raise MalformedJob("a message is a JSON object")
            if s3_events.is_s3_notification(body):
                events = s3_events.parse_notification(body)
                outcomes = [self._apply(event) for event in events]
                return outcomes[-1] if outcomes else s3_events.TEST_EVENT
            if sqs_jobs.is_job_payload(body):
                job = sqs_jobs.parse_sqs_job(body, message["MessageId"])
                self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"],
                                                   VisibilityTimeout=JOB_VISIBILITY_SECONDS)
                return sqs_jobs.accept_sqs_job(self.db, self.document_store, job, self.s3_client_for(None),
                                               fingerprint=self.fingerprint, max_bytes=self.settings.upload.max_bytes,
                                               message=body)
            raise MalformedJob("neither an S3 event notification nor a job (upload_uri, content_hash, …)")
        except (ValueError, MalformedJob, s3_events.NotAnS3Event) as exc:
            _log.warning("sqs %s: message %s is malformed, left for the dead-letter queue: %s", queue_name(url),
                         message["MessageId"], exc)
            return "malformed"
        except Exception as exc:  # noqa: BLE001 - received again after the backoff, dead-lettered after 3
            _log.warning("sqs %s: message %s not applied (%s: %s); it is received again after the backoff",
                         queue_name(url), message["MessageId"], type(exc).__name__, exc)
            return "error"

    def _apply(self, event: s3_events.ObjectEvent) -> str:
        def metric_intake_for(source: Source, client: Any):
            if source.kind != "metrics":
                return None
            return s3_metric_intake(self.db, self.metric_store, client, max_bytes=self.settings.metrics.max_bytes,
                                    valid_threshold=self.settings.metrics.valid_threshold)

        return s3_events.apply_event(
            self.db, event, lambda source: self.s3_client_for(source.endpoint_url),
            max_bytes_for=lambda s: self.settings.metrics.max_bytes if s.kind == "metrics"
            else self.settings.upload.max_bytes,
            metric_intake_for=metric_intake_for)
