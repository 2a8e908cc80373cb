"""The queue sensors as the daemon ticks them: jobs into the ledger, depths in the tick's message, and the
dead-letter check run (and failing) when a dead letter arrives."""

import dagster as dg

from ingestion_pipeline.defs.queues.redis_sensor import redis_queue_sensor
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource, UploadStoreResource
from ingestion_pipeline.queues import redis_keys
from ingestion_pipeline.queues.job_messages import new_job
from ingestion_pipeline.queues.producer import push
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline_tests.helpers import code_location, shared_embedder, table


def _tick(instance, cursor=None):
    settings = SettingsResource()
    resources = {"postgres": PostgresResource(), "settings": settings,
                 "upload_store": UploadStoreResource(settings=settings), "embedder": shared_embedder()}
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        return redis_queue_sensor(context)


def test_without_redis_the_sensor_says_so(database):
    with dg.instance_for_test() as instance:
        tick = _tick(instance)
    assert tick.skip_reason.skip_message.startswith("no Redis queue")


def test_a_tick_takes_jobs_and_a_dead_letter_fails_the_check(redis_queue, database, db, tmp_path):
    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    for name in ("a.md", "b.md"):
        (root / name).write_text(f"# {name}\n\nText of {name}.\n")
        push(redis_queue, new_job("kb1", str(root / name)))
    redis_queue.lpush(redis_keys.QUEUE, b"[1, 2]")
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)

    with dg.instance_for_test() as instance:
        first = _tick(instance)
        assert first.cursor == "1" and len(first.run_requests) == 1  # the dead-letter count changed: check it
        assert [r["status"] for r in table(db, "SELECT status FROM ingestion_runs")] == ["queued", "queued"]
        quiet = _tick(instance, cursor="1")
        assert quiet.run_requests in (None, []) and quiet.skip_reason.skip_message == (
            "took 0 job(s); queue high 0 / normal 0 / low 0, retrying 0, processing 0, dead letters 1; "
            "consumers 0 alive")

        check_job = code_location().resolve_job_def("queue_check_job")
        result = check_job.execute_in_process(instance=instance)
        [evaluation] = result.get_asset_check_evaluations()
        assert not evaluation.passed
        assert evaluation.description == "dead letters wait: 1 on rag:ingest:queue:dead-letter"
        redis_queue.delete(redis_keys.DEAD_LETTER)
        [evaluation] = check_job.execute_in_process(instance=instance).get_asset_check_evaluations()
        assert evaluation.passed and evaluation.metadata["rag:ingest:queue:dead-letter"].value == 0
