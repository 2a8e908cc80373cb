"""SQS against the moto server: S3 event notifications configured on the bucket, job messages, a duplicate
delivery, an out-of-order older event, a delete, and a message that fails three times -> the dead-letter
queue (the queue's own redrive policy) -> replay."""

import hashlib
import json
import time
import uuid

import boto3
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.queues.sqs import SqsIntake, depth, list_dead_letters, replay_dead_letters, sqs_client
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.services import Services
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.registry import add_source
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import put, table


@pytest.fixture
def notified_bucket(bucket, s3_env, monkeypatch):
    """The bucket's ObjectCreated/ObjectRemoved events go to a queue whose dead-letter queue takes a message
    after 3 receives; the intake is configured with that queue."""
    client, name = bucket
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", s3_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env)  # where job messages' objects are
    monkeypatch.setenv("INGESTION_SQS_WAIT_SECONDS", "0")
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "1,1,1")
    sqs = boto3.client("sqs", endpoint_url=s3_env, region_name="us-east-1")
    suffix = uuid.uuid4().hex[:8]
    dead = sqs.create_queue(QueueName=f"events-dlq-{suffix}")["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName=f"events-{suffix}", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": dead_arn, "maxReceiveCount": "3"})})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    client.put_bucket_notification_configuration(Bucket=name, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
    sqs.purge_queue(QueueUrl=url)  # moto's test event for the configuration
    monkeypatch.setenv("INGESTION_SQS_QUEUE_URLS", url)
    return client, name, sqs, url


def _intake(database) -> SqsIntake:
    services = Services(load_settings())
    return SqsIntake(sqs_client(), database, services.settings, document_store=services.document_store,
                     metric_store=services.metric_store, s3_client_for=services.s3_client,
                     fingerprint=services.fingerprint)


def _event(bucket: str, key: str, name: str, sequencer: str) -> str:
    record = {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": name,
              "s3": {"bucket": {"name": bucket}, "object": {"key": key, "sequencer": sequencer}}}
    return json.dumps({"Records": [record]})


@pytest.mark.integration
def test_events_jobs_duplicates_order_deletes_and_dead_letters(notified_bucket, database, db, s3_env, tmp_path):
    client, bucket, sqs, url = notified_bucket
    with database.connection() as conn:
        source = add_source(conn, f"s3://{bucket}/kb/", tenant_id="acme", endpoint_url=s3_env)
    intake = _intake(database)

    put(client, bucket, "kb/a.md", "# A\n\nfirst text\n")
    put(client, bucket, "elsewhere/b.md", "# B\n\nnot watched\n")
    polled = intake.poll(url)
    assert polled.outcomes == {"applied": 1, "no source watches it": 1} and depth(sqs, url) == 0
    rows = table(db, "SELECT file_id, source_key, status FROM ingestion_runs WHERE source_id = %s", source.source_id)
    assert [(r["source_key"], r["status"]) for r in rows] == [("kb/a.md", "queued")]

    # a redelivery of an event with S3's sequencer, then an older event arriving late: nothing changes
    sqs.send_message(QueueUrl=url, MessageBody=_event(bucket, "kb/a.md", "ObjectCreated:Put", "0062A1B2C3"))
    sqs.send_message(QueueUrl=url, MessageBody=_event(bucket, "kb/a.md", "ObjectCreated:Put", "0062A1B2C3"))
    sqs.send_message(QueueUrl=url, MessageBody=_event(bucket, "kb/a.md", "ObjectRemoved:Delete", "62A1B2C2"))
    assert intake.poll(url).outcomes == {"applied": 1, "stale": 2}
    assert len(table(db, "SELECT * FROM ingestion_runs WHERE source_id = %s", source.source_id)) == 1
    assert table(db, "SELECT status FROM source_objects WHERE key = 'kb/a.md'")[0]["status"] == "queued"

    # a change is a new version's row; a delete deactivates (the HEAD says it is gone)
    put(client, bucket, "kb/a.md", "# A\n\nsecond text\n")
    intake.poll(url)
    assert len(table(db, "SELECT * FROM ingestion_runs WHERE source_id = %s AND status = 'queued'",
                     source.source_id)) == 2
    client.delete_object(Bucket=bucket, Key="kb/a.md")
    assert intake.poll(url).outcomes == {"applied": 1}
    assert table(db, "SELECT status FROM source_objects WHERE key = 'kb/a.md'")[0]["status"] == "deleted"
    [gone] = table(db, "SELECT stats FROM ingestion_runs WHERE source_id = %s AND status = 'succeeded'",
                   source.source_id)
    assert gone["stats"]["action"] == "deactivated"

    # a metrics source's object becomes a metric upload, as its listing would make it
    with database.connection() as conn:
        add_source(conn, f"s3://{bucket}/exports/", tenant_id="acme", name="exports", endpoint_url=s3_env,
                   kind="metrics", platform="meta")
    export = write_export(tmp_path / "meta.csv", "meta", daily_rows(1, 1, 2, 3))
    put(client, bucket, "exports/meta.csv", export.read_bytes())
    assert intake.poll(url).outcomes == {"applied": 1}
    [upload] = table(db, "SELECT workspace_id, status, total_rows FROM data_uploads")
    assert (upload["workspace_id"], upload["status"]) == ("acme", "pending")

    # job messages: bytes already in S3, checked against their hash; a job delivered twice is accepted once.
    # A job's object must lie in a location bound to its tenant (read through the AWS environment's endpoint)
    with database.connection() as conn:
        locations.bind(conn, "acme", locations.location(bucket, "uploads/"), by="test")
    body = b"# Job\n\nsent over SQS\n"
    put(client, bucket, "uploads/job.md", body)
    job = {"tenant": "acme", "upload_uri": f"s3://{bucket}/uploads/job.md", "filename": "job.md",
           "content_hash": hashlib.sha256(body).hexdigest(), "job_id": "job-1"}
    for _ in range(2):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(job))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({**job, "job_id": "job-2", "content_hash": "0" * 64}))
    assert intake.poll(url).outcomes == {"accepted": 1, "already accepted": 1, "failed": 1,
                                         "no source watches it": 1}  # the put's own notification
    jobs = {j["job_id"]: j for j in table(db, "SELECT * FROM queue_jobs")}
    assert (jobs["job-1"]["status"], jobs["job-2"]["status"]) == ("queued", "failed")
    assert jobs["job-2"]["outcome"]["error_code"] == "ERR_CHECKSUM"
    assert len(table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s", jobs["job-1"]["file_id"])) == 1
    listed = {j["job_id"]: j for j in json_lines(run_cli("queue", "jobs", "--intake", "sqs", "--json").stdout)}
    assert (listed["job-1"]["status"], listed["job-1"]["file_status"]) == ("queued", "queued")
    assert (listed["job-2"]["status"], listed["job-2"]["error_code"]) == ("failed", "ERR_CHECKSUM")

    # malformed: not deleted, received three times, then the redrive policy moves it; replay brings it back
    sqs.send_message(QueueUrl=url, MessageBody="{not json")
    for _ in range(3):
        assert intake.poll(url).outcomes == {"malformed": 1}  # then invisible for the backoff (1 s here)
        time.sleep(1.2)
    last = intake.poll(url)
    assert last.received == 0 and last.dead_letters == 1
    [letter] = list_dead_letters(sqs, url)
    assert letter["body"] == "{not json" and int(letter["receives"]) >= 3
    assert replay_dead_letters(sqs, url) == 1
    assert intake.poll(url).outcomes == {"malformed": 1}


@pytest.mark.integration
def test_a_forged_sequencer_does_not_shadow_the_real_change(notified_bucket, database, db, s3_env):
    """Anyone who may send to the queue can write an event: one with sequencer "FFFF…" made the real later
    change be ignored as stale. The sequencer is never trusted past the object's own HEAD."""
    client, bucket, sqs, url = notified_bucket
    with database.connection() as conn:
        source = add_source(conn, f"s3://{bucket}/kb/", tenant_id="acme", endpoint_url=s3_env)
    intake = _intake(database)
    put(client, bucket, "kb/a.md", "# A\n\nfirst text\n")  # and its own notification
    sqs.send_message(QueueUrl=url, MessageBody=_event(bucket, "kb/a.md", "ObjectCreated:Put", "F" * 32))
    assert intake.poll(url).outcomes["applied"] == 2  # the forged one HEADs and changes nothing, in order
    # the real change, told only by its event (S3's, with a lower sequencer than the forged one)
    client.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
    put(client, bucket, "kb/a.md", "# A\n\nthe real change\n")
    sqs.send_message(QueueUrl=url, MessageBody=_event(bucket, "kb/a.md", "ObjectCreated:Put", "0062A1B2C3"))
    outcomes = intake.poll(url).outcomes
    assert outcomes == {"applied": 1}, outcomes
    assert len(table(db, "SELECT * FROM ingestion_runs WHERE source_id = %s AND status = 'queued'",
                     source.source_id)) == 2  # the first text and the real change, each a version
