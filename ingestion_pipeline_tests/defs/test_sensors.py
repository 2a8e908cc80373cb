"""upload_sensor and the run-status sensors, with Dagster's test contexts."""

import subprocess
import sys

import dagster as dg
import psycopg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.ledger.run_status_sensors import ledger_on_run_failure
from ingestion_pipeline.defs.partitions import (
    BATCH_TAG,
    BULK_TENANT_TAG,
    RUN_CLASS_TAG,
    TENANT_TAG,
    document_batches,
)
from ingestion_pipeline.defs.resources import EmbedderResource, PostgresResource, SettingsResource
from ingestion_pipeline.defs.sources.upload_sensor import upload_sensor
from ingestion_pipeline.runtime import launching
from ingestion_pipeline.runtime.launching import plan_document_runs
from ingestion_pipeline_tests.helpers import materialize_batch, submit, table


def _tick(instance) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance,
        resources={"postgres": PostgresResource(), "settings": SettingsResource(batch_max_files=50)},
    ) as context:
        return upload_sensor(context)


def test_upload_sensor_batches_200_files_into_a_handful_of_runs(database, db, tmp_path):
    paths = []
    for i in range(200):
        p = tmp_path / f"doc-{i}.md"
        p.write_text(f"# Doc {i}\n\nBody of document {i}.")
        paths.append(p)
    submit(database, "acme", *paths)
    with dg.instance_for_test() as instance:
        result = _tick(instance)
        assert len(result.run_requests) == 4
        keys = [r.partition_key for r in result.run_requests]
        assert [r.run_key for r in result.run_requests] == keys
        assert all(r.tags[BATCH_TAG] == r.partition_key for r in result.run_requests)
        assert {r.tags[TENANT_TAG] for r in result.run_requests} == {"acme"}  # the runs page filters by tenant
        [add] = result.dynamic_partitions_requests
        assert sorted(add.partition_keys) == sorted(keys)
        instance.add_dynamic_partitions(document_batches.name, keys)

        again = _tick(instance)  # a repeated tick: same run keys (Dagster launches a run key once), no new batches
        assert sorted(r.run_key for r in again.run_requests) == sorted(keys)
        assert again.dynamic_partitions_requests == []
        assert table(db, "SELECT count(DISTINCT partition_key) AS n FROM ingestion_runs")[0]["n"] == 4


def test_a_small_batch_is_interactive_and_queued_first_a_big_one_bulk_and_shared_per_tenant(database, tmp_path):
    """The run queue's fair shares (dagster.yaml): a single upload is `interactive` (dequeued first, a slot bulk
    runs never take) while another tenant's big load is `bulk`, its runs counted against that tenant."""
    paths = []
    for i in range(70):  # batches of 50 and 20 (above the 10 files of an interactive batch)
        p = tmp_path / f"bulk-{i}.md"
        p.write_text(f"# Bulk {i}\n\nBody of bulk document {i}.")
        paths.append(p)
    submit(database, "acme", *paths)
    single = tmp_path / "single.md"
    single.write_text("# Single\n\nA person's one upload.")
    submit(database, "beta", single)
    with dg.instance_for_test() as instance:
        requests = _tick(instance).run_requests
    by_tenant: dict[str, list] = {}
    for r in requests:
        by_tenant.setdefault(r.tags[TENANT_TAG], []).append(r.tags)
    assert len(by_tenant["acme"]) == 2 and all(
        t[RUN_CLASS_TAG] == "bulk" and t[BULK_TENANT_TAG] == "acme" and "dagster/priority" not in t
        for t in by_tenant["acme"])
    [interactive] = by_tenant["beta"]
    assert interactive[RUN_CLASS_TAG] == "interactive" and interactive["dagster/priority"] == "10"
    assert BULK_TENANT_TAG not in interactive


def test_upload_sensor_with_nothing_queued_requests_nothing(database):
    with dg.instance_for_test() as instance:
        result = _tick(instance)
        assert result.run_requests == [] and result.dynamic_partitions_requests == []


def test_failed_runs_retry_their_files_with_backoff_then_dead_letter(database, db, corpus_dir, monkeypatch):
    """The run-failure sensor hands a failed run's files back as a failed attempt; after the last
    attempt they end dead_letter, with a way to replay them."""
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0,0")  # 3 attempts, no waiting
    submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    broken = {"embedder": EmbedderResource(model_path="/nonexistent/model")}
    run_keys = []
    with dg.instance_for_test() as instance:
        for attempt in (1, 2, 3):
            [request] = _tick(instance).run_requests  # each failure bumps the launch generation: a new run key
            run_keys.append(request.run_key)
            result = materialize_batch(instance, request.partition_key, raise_on_error=False, resources=broken)
            assert not result.success
            run = instance.get_run_by_id(result.run_id)
            failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
            with dg.build_run_status_sensor_context(
                sensor_name="ledger_on_run_failure", dagster_event=failure, dagster_instance=instance,
                dagster_run=run, resources={"postgres": PostgresResource(), "settings": SettingsResource()},
            ) as context:
                ledger_on_run_failure(context.for_run_failure())
            [row] = table(db, "SELECT * FROM ingestion_runs")
            assert row["attempts"] == attempt and row["error_code"] == "run_failed"
            assert f"Dagster run {result.run_id} failed" in row["error"]
            assert row["status"] == ("queued" if attempt < 3 else "dead_letter")
        assert _tick(instance).run_requests == []  # nothing left to launch
    assert len(set(run_keys)) == 3 and run_keys[0] == run_keys[1].split(":")[0]
    assert row["finished_at"] is not None and f"retry {row['file_id']}" in row["suggestion"]
    events = [h["event"] for h in table(db, "SELECT event FROM ledger_history ORDER BY history_id")]
    assert events == ["retry_scheduled", "retry_scheduled", "dead_letter"]


def test_job_is_defined_on_the_document_batches():
    assert document_batch_job.name == "document_batch_job"


def test_objects_an_s3_event_told_of_run_interactive_a_listings_bulk(database):
    """A small batch of objects S3 notified (someone just wrote them) is `interactive`, as an upload is; the
    same objects found by a listing stay `bulk`."""
    from ingestion_pipeline.defs.sources.s3_sensor import s3_sensor
    from ingestion_pipeline.sources import sync
    from ingestion_pipeline.sources.registry import add_source

    def obj(key: str) -> dict:
        return {"Key": key, "ETag": f'"{key}-etag"', "Size": 100, "LastModified": None}

    with database.connection() as conn:
        notified = add_source(conn, "s3://kb-events/docs/", tenant_id="acme")
        listed = add_source(conn, "s3://kb-listed/docs/", tenant_id="acme")
    with database.transaction() as conn:
        sync.record_object(conn, notified, obj("docs/new.md"), "docs/new.md", max_bytes=10**6)
        sync._record_page(conn, listed, 1, [obj("docs/a.md"), obj("docs/b.md")], 10**6, sync.SyncReport(listed.name))
    with dg.instance_for_test() as instance, dg.build_sensor_context(
            instance=instance, resources={"postgres": PostgresResource(), "settings": SettingsResource()}) as context:
        requests = s3_sensor(context).run_requests
    classes = sorted((r.tags["ingestion/source"], r.tags[RUN_CLASS_TAG]) for r in requests)
    assert classes == sorted([(listed.name, "bulk"), (notified.name, "interactive")])


def test_with_the_fast_lane_on_a_fresh_interactive_batch_is_left_to_it_for_a_grace(database, db, tmp_path,
                                                                                   monkeypatch):
    """Where the fast lane launches small batches, the sensor requesting them too raced it (both looked for the
    run key before either run existed: a second, empty run). The sensor leaves a fresh one to the fast lane,
    and launches it itself once the grace is over; bulk batches are the sensor's at once."""
    monkeypatch.setenv("INGESTION_DAGSTER_URL", "http://127.0.0.1:9")  # the fast lane is on
    single = tmp_path / "single.md"
    single.write_text("# Single\n\nA person's one upload.")
    submit(database, "beta", single)
    paths = []
    for i in range(60):
        paths.append(tmp_path / f"bulk-{i}.md")
        paths[-1].write_text(f"# Bulk {i}\n\nBody of bulk document {i}.")
    submit(database, "acme", *paths)
    with dg.instance_for_test() as instance:
        fresh = _tick(instance).run_requests
        assert {r.tags[TENANT_TAG] for r in fresh} == {"acme"}  # the bulk batches, not beta's upload
        db.execute("UPDATE ingestion_runs SET created_at = created_at - interval '10 seconds' WHERE tenant_id = 'beta'")
        later = _tick(instance).run_requests
    assert [r.tags[RUN_CLASS_TAG] for r in later if r.tags[TENANT_TAG] == "beta"] == ["interactive"]


def test_submit_and_the_fast_lane_import_no_dagster():
    """A one-file `submit` asks the webserver to launch its run: importing Dagster for that was over a second of
    it. The plan (documents/run_plan.py) is plain data and the launch plain HTTP. Nor redis-py (~55 ms): the
    CLI's queue commands import it when they connect."""
    code = ("import sys, ingestion_pipeline.cli, ingestion_pipeline.runtime.fast_lane; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'dagster_aws', 'redis')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_submit_imports_no_numpy(database_url, tmp_path):
    """`submit` builds the pipeline's fingerprint, which names the model and its precision, but never computes a
    vector: numpy (~80 ms, a fifth of the command) is imported where vectors are made, not on its path."""
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA person's one upload.")
    code = ("import sys; from ingestion_pipeline.cli import main; "
            f"rc = main(['submit', '--tenant', 'acme', {str(note)!r}]); "
            "print('exit', rc, 'numpy' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stderr.strip().splitlines()[-1] == "exit 0 False", done.stderr[-2000:]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM ingestion_runs WHERE tenant_id = 'acme'").fetchone()[0] == 1


def test_the_fast_lane_launches_what_the_sensor_would(database, tmp_path):
    """The fast lane's plain plan and the sensor's run requests are one plan: same keys, same tags."""
    from ingestion_pipeline.core.settings import BatchSettings
    from ingestion_pipeline.documents.run_plan import plan_batch_runs

    single = tmp_path / "single.md"
    single.write_text("# Single\n\nA person's one upload.")
    submit(database, "beta", single)
    planned = plan_batch_runs(database, BatchSettings(), run_types=("upload",)).runs
    with dg.instance_for_test() as instance:
        requests = plan_document_runs(instance, database, BatchSettings(), run_types=("upload",)).run_requests
    assert [(p.run_key, p.partition_key, p.tags) for p in planned] == \
        [(r.run_key, r.partition_key, r.tags) for r in requests]
    assert [p.interactive for p in planned] == [True]


def test_a_batch_the_fast_lane_launched_is_not_requested_by_the_sensor(database, tmp_path, monkeypatch):
    """The fast lane's run is its own, not a sensor's (the UI's "Launched by" shows the fast lane): Dagster's run-key
    check would not skip the sensor's request for the batch, so the sensor looks the key up among the fast lane's
    runs. A run with the same key launched by anyone else (a person) does not hide the batch from the sensor."""
    from ingestion_pipeline import definitions
    from ingestion_pipeline.core.run_tags import DOCUMENT_JOB, LAUNCHED_BY_TAG, RUN_KEY_TAG, USER_TAG

    job = definitions.defs().resolve_job_def(DOCUMENT_JOB)
    monkeypatch.setenv("INGESTION_DAGSTER_URL", "off")  # no grace: the sensor plans the fresh batch at once
    for name in ("first", "second"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nA person's upload.")
        submit(database, name, tmp_path / f"{name}.md")
    with dg.instance_for_test() as instance:
        requests = _tick(instance).run_requests
        assert [r.tags[RUN_KEY_TAG] for r in requests] == [r.run_key for r in requests] and len(requests) == 2
        by_tenant = {r.tags[TENANT_TAG]: r for r in requests}
        instance.add_dynamic_partitions(document_batches.name, [r.partition_key for r in requests])
        fast, person = by_tenant["first"], by_tenant["second"]
        instance.create_run_for_job(job, tags={
            **fast.tags, "dagster/partition": fast.partition_key, LAUNCHED_BY_TAG: "fast_lane",
            USER_TAG: "ingestion-pipeline fast lane"})
        instance.create_run_for_job(job, tags={**person.tags, "dagster/partition": person.partition_key})
        again = _tick(instance).run_requests
        assert [r.tags[TENANT_TAG] for r in again] == ["second"]
        # a fast-lane run the webserver created but never submitted (still NOT_STARTED past a minute) hides nothing
        monkeypatch.setattr(launching, "UNSUBMITTED_AFTER_SECONDS", 0.0)
        assert sorted(r.tags[TENANT_TAG] for r in _tick(instance).run_requests) == ["first", "second"]


def test_a_run_whose_host_cannot_embed_hands_its_files_back_uncounted_and_held(database, db, tmp_path, monkeypatch):
    """Under the daemon, a run that failed because its host cannot embed (here: set to CUDA without one) is the
    host's fault, not the files': the run-failure sensor gives them back with no attempt counted, held for the
    longest backoff so the sensor does not relaunch them at once on the same host, twice as long at each hand-back
    while the fault lasts, and never dead-letters them."""
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0,40")
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe ferry leaves at nine.\n")
    submit(database, "acme", note)
    # after the submit: the session's shared embedder (helpers.shared_embedder) is built from the settings of its
    # first use, and a CUDA one left behind failed a later test in the same process
    monkeypatch.setenv("INGESTION_EMBEDDING_DEVICE", "cuda")  # this machine has no NVIDIA GPU
    with dg.instance_for_test() as instance:
        for handed_back in range(3):  # more failures than the attempts allowed: still never dead-lettered
            [request] = _tick(instance).run_requests
            result = materialize_batch(instance, request.partition_key, raise_on_error=False,
                                       resources={"embedder": EmbedderResource()})  # the model as the settings say
            assert not result.success
            failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
            with dg.build_run_status_sensor_context(
                sensor_name="ledger_on_run_failure", dagster_event=failure, dagster_instance=instance,
                dagster_run=instance.get_run_by_id(result.run_id),
                resources={"postgres": PostgresResource(), "settings": SettingsResource()},
            ) as context:
                ledger_on_run_failure(context.for_run_failure())
            [row] = table(db, "SELECT status, attempts, owner, error_code, "
                              "extract(epoch FROM next_attempt_at - now()) AS held FROM ingestion_runs")
            assert (row["status"], row["attempts"], row["owner"], row["error_code"]) == ("queued", 0, None, None)
            hold = 40 * 2 ** handed_back  # 40 s, 80 s, 160 s: the longest backoff, doubled at each hand-back
            assert hold - 10 < row["held"] <= hold
            assert _tick(instance).run_requests == []  # held: the same host would fail it again at once
            db.execute("UPDATE ingestion_runs SET next_attempt_at = now()")  # the hold has passed
    history = table(db, "SELECT event, message FROM ledger_history ORDER BY history_id")
    assert [h["event"] for h in history] == ["claimed", "host_cannot_embed"] * 3
    assert all("cannot embed on CUDA" in h["message"] for h in history if h["event"] == "host_cannot_embed")
