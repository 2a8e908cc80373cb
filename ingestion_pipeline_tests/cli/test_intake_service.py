"""The intake service (`ingestion-pipeline intake`) does the work of bringing files in, and the sensors only plan:
jobs into the ledger from a real redis-server, the janitor's recovery as a line of the service's log, a failing
duty that does not end the service, and SIGTERM that does."""

import os
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from ingestion_pipeline.cli.bootstrap import Context
from ingestion_pipeline.cli.intake import intake_duties
from ingestion_pipeline.core.duties import Duties, Duty
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.defs.queues.redis_sensor import redis_queue_sensor
from ingestion_pipeline.defs.resources import SettingsResource
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_contract import push
from ingestion_pipeline_tests.helpers import code_location, intake_service_until, shared_embedder, submit, table


def _context(database_url: str) -> Context:
    return Context(database_url, load_settings(), embedder=shared_embedder())


def _tick(instance, cursor=None):
    with dg.build_sensor_context(instance=instance, resources={"settings": SettingsResource()},
                                 cursor=cursor) as context:
        return redis_queue_sensor(context)


def _two_jobs_and_a_malformed_one(redis_queue, database, tmp_path: Path) -> None:
    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    for name in ("a.md", "b.md"):
        (root / name).write_text(f"# {name}\n\nText of {name}.\n")
        push(redis_queue, new_job("kb1", str(root / name)))
    redis_queue.lpush(redis_contract.QUEUE, b"[1, 2]")
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)


def test_without_redis_the_sensor_says_so(database):
    with dg.instance_for_test() as instance:
        tick = _tick(instance)
    assert tick.skip_reason.skip_message.startswith("no Redis queue")


def test_the_sensor_only_reads_and_the_service_takes_the_jobs(redis_queue, database, database_url, db, tmp_path):
    _two_jobs_and_a_malformed_one(redis_queue, database, tmp_path)
    with dg.instance_for_test() as instance:
        before = _tick(instance)
        assert before.run_requests in (None, []) and before.skip_reason.skip_message.startswith(
            "queue high 0 / normal 3 / low 0")
        assert table(db, "SELECT * FROM ingestion_runs") == [] and redis_queue.llen(redis_contract.QUEUE) == 3

        lines: list[str] = []
        with _context(database_url) as ctx:
            [result] = Duties(intake_duties(ctx, ("redis",)), lines.append).run_once()
        assert result.error is None
        assert lines == ["redis: took 3 job(s): 2 accepted, 1 malformed; queue high 0 / normal 0 / low 0, "
                         "retrying 0, processing 0, dead letters 1; consumers 0 alive"]
        assert [r["status"] for r in table(db, "SELECT status FROM ingestion_runs")] == ["queued", "queued"]

        first = _tick(instance)
        assert first.cursor == "1" and len(first.run_requests) == 1  # the dead-letter count changed: check it
        quiet = _tick(instance, cursor="1")
        assert quiet.run_requests in (None, []) and quiet.skip_reason.skip_message == (
            "queue high 0 / normal 0 / low 0, retrying 0, processing 0, dead letters 1; consumers 0 alive")

        check_job = code_location().resolve_job_def("queue_check_job")
        [evaluation] = check_job.execute_in_process(instance=instance).get_asset_check_evaluations()
        assert not evaluation.passed
        assert evaluation.description == "dead letters wait: 1 on rag:ingest:queue:dead-letter"
        redis_queue.delete(redis_contract.DEAD_LETTER)
        [evaluation] = check_job.execute_in_process(instance=instance).get_asset_check_evaluations()
        assert evaluation.passed and evaluation.metadata["rag:ingest:queue:dead-letter"].value == 0


def test_the_janitor_hands_back_an_expired_claim_and_says_so_in_the_services_log(database, database_url, db,
                                                                                tmp_path):
    from ingestion_pipeline.core import ledger
    from ingestion_pipeline.core.ledger import DOCUMENT_FILES, Worker
    from ingestion_pipeline_tests.helpers import batch_queued

    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA body.")
    submit(database, "acme", note)
    [key] = batch_queued(database)
    with database.transaction() as conn:
        [claimed] = ledger.claim(conn, DOCUMENT_FILES, Worker("dead-run", "dead-run", 60), partition_key=key)
        conn.execute("UPDATE ingestion_runs SET lease_expires_at = now() - interval '1 s' WHERE file_id = %s",
                     (claimed["file_id"],))
    lines: list[str] = []
    with dg.instance_for_test() as instance, _context(database_url) as ctx:
        duties = Duties(intake_duties(ctx, ("janitor",), instance=instance), lines.append)
        duties.run_once()
        assert lines == ["janitor: 1 expired claim(s) handed back (0 dead-lettered)"]
        [row] = table(db, "SELECT status, error_code FROM ingestion_runs")
        assert (row["status"], row["error_code"]) == ("queued", "lease_expired")
        duties.run_once()
        assert len(lines) == 1  # nothing to recover: nothing said


def test_a_failing_duty_is_logged_once_and_retried_while_the_others_go_on():
    calls = {"bad": 0, "good": 0}

    def bad():
        calls["bad"] += 1
        if calls["bad"] < 4:
            raise ConnectionError("the database does not answer")
        return None

    def good():
        calls["good"] += 1
        return "did one thing" if calls["good"] == 1 else None

    lines: list[str] = []
    duties = Duties([Duty("bad", 0.01, bad), Duty("good", 0.01, good)], lines.append)
    runner = threading.Thread(target=duties.run_until_stopped)
    runner.start()
    deadline = time.monotonic() + 10
    while (calls["bad"] < 6 or calls["good"] < 6) and time.monotonic() < deadline:
        time.sleep(0.01)
    duties.stop()
    runner.join(5)
    assert not runner.is_alive() and calls["bad"] >= 6 and calls["good"] >= 6
    assert sorted(lines) == ["bad: round failed: ConnectionError: the database does not answer (tried again every "
                             "0.01 s)", "bad: working again", "good: did one thing"]


def test_a_service_needs_a_duty_and_only_names_known_ones(database_url):
    from ingestion_pipeline.cli import main

    with pytest.raises(ValueError, match="at least one duty"):
        Duties([], print)
    assert main(["intake", "--once", "--only", "redis,mail"]) == 2


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_the_service_takes_a_pushed_job_within_seconds_and_ends_on_sigterm(redis_queue, database, database_url,
                                                                          db, tmp_path, project_dagster_home):
    _two_jobs_and_a_malformed_one(redis_queue, database, tmp_path)
    text = intake_service_until(
        lambda: len(table(db, "SELECT * FROM ingestion_runs WHERE status = 'queued'")) == 2, tmp_path / "intake.log",
        {**os.environ, "INGESTION_JANITOR_INTERVAL_SECONDS": "1"})
    assert "intake started: redis every 1 s, sources every 30 s, janitor every 1 s" in text
    assert "redis: took 3 job(s): 2 accepted, 1 malformed" in text and text.rstrip().endswith("intake stopped")
