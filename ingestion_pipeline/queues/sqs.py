"""SQS: the queues (client, depths, dead letters), job messages, and one bounded round of receiving.

**Plumbing**: the client, a queue's dead-letter queue (from its redrive policy), and moving dead letters
back (``replay_dead_letters``).

**Job messages** name bytes already in S3 (no file bytes in the message): ``{"tenant", "upload_uri":
"s3://bucket/key", "content_hash": "<sha256 hex>", "filename"}`` and optionally ``job_id`` (default: the SQS message
id; unique per tenant: another tenant's job of the same id is its own, while the tenant's own later job of other
content under a taken id is refused), ``doc`` (a stable document key: a later job with the same key is a new version
of that document) and ``title``. The object is streamed into the upload store and hashed on the way; bytes that do
not match ``content_hash`` fail the job (``ERR_CHECKSUM``). The job's ``queue_jobs`` row is written in the
transaction that writes its ledger row.

**One round on one queue** (``SqsIntake.poll``): receive (long polling), apply each message to the ledger,
delete it only after that commits. A message is S3 event notifications of a watched bucket (``s3_events``)
or a job. One that cannot be applied now - malformed, or an error of S3 or the database - is not deleted:
its visibility timeout is set to the retry backoff (5 s, 10 s, 30 s by its receive count) and the queue's
redrive policy moves it to the dead-letter queue after its ``maxReceiveCount`` receives (3 in the docs'
setup). A message is applied and deleted within a second or two, so no visibility extension is needed beyond
the one a job takes before it streams its object (5 minutes).
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import BadFileName, UnsupportedFileType, check_file_name
from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.s3_clients import build_sqs_client
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.documents.intake import SKIPPED, SubmitResult, check_document_name, keyed_uri, submit_stored
from ingestion_pipeline.queues import jobs, s3_events
from ingestion_pipeline.queues.jobs import MalformedJob, load_message
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.metric_intake import s3_metric_intake
from ingestion_pipeline.sources.registry import Source, parse_s3_uri


# -- plumbing ----------------------------------------------------------------------------------------------------------
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


# -- job messages ------------------------------------------------------------------------------------------------------
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SqsJob:
    job_id: str
    tenant: str
    bucket: str
    key: str
    content_hash: str
    filename: str
    doc: str | None = None
    title: str | None = None


def is_job_payload(body: dict) -> bool:
    return "upload_uri" in body or "content_hash" in body


def parse_sqs_job(body: dict, message_id: str) -> SqsJob:
    def text(name: str, required: bool = True) -> str | None:
        value = body.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            raise MalformedJob(f"field {name!r} must be a non-empty string")
        return jobs.require_text(name, value)

    try:
        tenant = validate_tenant_id(text("tenant"))
        bucket, key = parse_s3_uri(text("upload_uri"))
        doc = text("doc", required=False)
        if doc is not None:
            keyed_uri(tenant, doc)
    except ValueError as exc:
        raise MalformedJob(str(exc)) from None
    content_hash = text("content_hash").lower()
    if not _SHA256.fullmatch(content_hash):
        raise MalformedJob("content_hash must be 64 hex digits (SHA-256)")
    filename = text("filename")
    try:
        check_file_name(filename)
    except BadFileName as exc:
        raise MalformedJob(f"filename: {exc}") from None
    return SqsJob(text("job_id", required=False) or f"sqs-{message_id}", tenant, bucket, key, content_hash, filename,
                  doc, text("title", required=False))


DUPLICATE_ID = "refused: job_id taken by another job"
JOB_IDENTITY = ("tenant", "upload_uri", "content_hash", "filename", "doc")  # what makes a redelivery the same job


def accept_sqs_job(db: Database, store: UploadStore, job: SqsJob, s3_client: Any, *, fingerprint: str,
                   max_bytes: int, message: dict) -> str:
    """``accepted``, ``already accepted`` or ``failed`` (recorded; the message can be deleted). Errors of S3,
    the database or the disk propagate: the message is received again later."""
    from botocore.exceptions import ClientError

    with db.connection() as conn:
        existing = jobs.find(conn, job.job_id, "sqs", tenant_id=job.tenant)  # ids are the tenant's own
    if existing is not None:
        before = existing["message"] or {}
        if all(before.get(k) == message.get(k) for k in JOB_IDENTITY):
            return "already accepted"  # a redelivery
        # another job of the tenant under a taken id: refused and said, never dropped as if it were the first
        _log.warning("sqs job %s refused: the tenant's id is already taken by a job of other content; nothing of "
                     "it is kept", job.job_id)
        return DUPLICATE_ID

    def failed(code: str, text: str) -> str:
        with db.transaction() as conn:
            jobs.record_refused(conn, job_id=job.job_id, intake="sqs", tenant_id=job.tenant,
                                       filename=job.filename, message=message, code=code, error=text)
        return "failed"

    try:
        check_document_name(job.filename)
    except UnsupportedFileType as exc:
        return failed("ERR_UNSUPPORTED_TYPE", str(exc))
    with db.connection() as conn:  # a job names a tenant and an object; neither is taken on its word
        if conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", (job.tenant,)).fetchone() is None:
            _log.warning("sqs job %s names unknown tenant %r: refused", job.job_id, job.tenant)
            return failed("ERR_UNKNOWN_TENANT", f"unknown tenant {job.tenant!r}: tenants are made by an operator, "
                                                "never by a job")
        try:
            # the object is read through the AWS environment's endpoint: its location's endpoint is ''
            locations.require(conn, job.tenant, locations.location(job.bucket, job.key),
                              entrance=f"sqs job {job.job_id}"[:200])
        except locations.LocationNotBound as exc:
            return failed("ERR_LOCATION_NOT_BOUND", str(exc))
    try:
        body = s3_client.get_object(Bucket=job.bucket, Key=job.key)["Body"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
            return failed("ERR_FILE_NOT_FOUND", f"s3://{job.bucket}/{job.key} does not exist")
        raise
    try:
        stored = store.put(job.tenant, body, max_bytes=max_bytes)
    except SizeLimitExceeded as exc:
        return failed("ERR_FILE_TOO_LARGE", str(exc))
    finally:
        body.close()
    if stored.sha256 != job.content_hash:
        if stored.created:
            store.release(stored.path)
        # the object's own hash is not said: a sender that could not compute it must not learn it from us
        return failed("ERR_CHECKSUM", f"s3://{job.bucket}/{job.key} does not have the SHA-256 the job says "
                                      f"({job.content_hash})")

    def record(conn: psycopg.Connection, result: SubmitResult) -> None:
        jobs.record_accepted(
            conn, job_id=job.job_id, intake="sqs", tenant_id=job.tenant, filename=job.filename, message=message,
            file_id=result.file_id, status=jobs.DONE if result.status == SKIPPED else jobs.QUEUED,
            outcome={"submit": result.status, "doc_id": result.doc_id})

    try:
        submit_stored(db, store, stored, tenant_id=job.tenant, filename=job.filename, fingerprint=fingerprint,
                      title=job.title, key=job.doc, in_same_transaction=record)
    except psycopg.errors.UniqueViolation:  # another consumer accepted the same job a moment earlier
        return "already accepted"
    return "accepted"


# -- one round on one queue --------------------------------------------------------------------------------------------
_log = logging.getLogger("ingestion_pipeline.queues")
DONE = {DUPLICATE_ID, "applied", "stale", s3_events.UNWATCHED, s3_events.TEST_EVENT, "accepted", "already accepted",
        "failed"}
JOB_VISIBILITY_SECONDS = 300
MAX_SQS_MESSAGE_BYTES = 1024 * 1024  # what SQS itself allows
MAX_SQS_MESSAGE_DEPTH = 12  # an S3 event notification nests six levels (Records, a record, s3, bucket, owner)


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
            jobs.follow_ledger(conn, "sqs")
        result.waiting = depth(self.sqs, url)
        result.dead_letters = dead_letter_depth(self.sqs, url)[1]
        return result

    def handle(self, url: str, message: dict) -> str:
        try:
            body = load_message(message["Body"], max_bytes=MAX_SQS_MESSAGE_BYTES, max_depth=MAX_SQS_MESSAGE_DEPTH)
            if not isinstance(body, dict):
                raise MalformedJob("a message is a JSON object")
            if s3_events.is_s3_notification(body):
                events = s3_events.parse_notification(body)
                outcomes = [self._apply(event) for event in events]
                return outcomes[-1] if outcomes else s3_events.TEST_EVENT
            if is_job_payload(body):
                job = parse_sqs_job(body, message["MessageId"])
                self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"],
                                                   VisibilityTimeout=JOB_VISIBILITY_SECONDS)
                return accept_sqs_job(self.db, self.document_store, job, self.s3_client_for(None),
                                               fingerprint=self.fingerprint, max_bytes=self.settings.upload.max_bytes,
                                               message=body)
            raise MalformedJob("neither an S3 event notification nor a job (upload_uri, content_hash, …)")
        except (ValueError, MalformedJob, s3_events.NotAnS3Event) as exc:  # load_message bounds the nesting
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
