"""A person's launch re-drives what its partition still has, or fails saying why: never green on nothing.

Dagster's own re-execution (``execute_job`` with ``ReexecutionOptions``, as the UI's "Re-execute" does) with the
parent's tags copied, as the UI copies them: before, the copied ``dagster/sensor_name`` made the code treat a
person's re-execution as automation, and it ran green with nothing embedded or promoted.
"""

import dagster as dg
import pytest

from ingestion_pipeline.defs.documents.batch_checks import BATCH_CHECKS
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.documents.pipeline import DocumentPipeline
from ingestion_pipeline.runtime.finalization import table_for_run
from ingestion_pipeline.runtime.steps import launched_by_a_person
from ingestion_pipeline_tests.defs.test_reliability import _run_failure_sensor
from ingestion_pipeline_tests.helpers import batch_queued, document_batch_job, submit, table

SENSOR_TAGS = {"dagster/sensor_name": "upload_sensor"}
# the steps of the run that evaluate checks (the batch checks, fingerprints_current, the dead-letter check)
CHECK_STEPS = {"promoted_batch_checks", "promoted_documents_fingerprints_current",
               "raw_documents_queue_dead_letters_empty"}


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def notes(tmp_path):
    paths = []
    for i in range(2):
        path = tmp_path / f"note-{i}.md"
        path.write_text(f"# Note {i}\n\nNote {i} says the ferry leaves at {i + 7}.\n")
        paths.append(path)
    return paths


def _run(**kwargs) -> dg.DagsterRun:
    return dg.DagsterRun(job_name="document_batch_job", run_id="r", **kwargs)


def test_who_launched_a_run_is_told_by_its_parent_not_by_copied_tags():
    assert not launched_by_a_person(_run(tags=SENSOR_TAGS))  # a sensor's run
    assert launched_by_a_person(_run(tags={"dagster/backfill": "b"}))  # a person's backfill or materialisation
    copied = {**SENSOR_TAGS, "dagster/parent_run_id": "p"}
    assert launched_by_a_person(_run(tags=copied, parent_run_id="p", root_run_id="p"))  # the UI's re-execution
    retry = {**copied, "dagster/retry_number": "1"}
    assert not launched_by_a_person(_run(tags=retry, parent_run_id="p", root_run_id="p"))  # the retry daemon's


def _first_run_fails_at_embedding(instance, database, notes, monkeypatch) -> tuple[str, dg.JobExecutionResult]:
    submit(database, "acme", *notes)
    [key] = batch_queued(database)
    instance.add_dynamic_partitions(document_batches.name, [key])
    embed = DocumentPipeline.embed_batch

    def missing_table(self, partition_key):
        raise RuntimeError('relation "chunk_embeddings" does not exist')

    monkeypatch.setattr(DocumentPipeline, "embed_batch", missing_table)
    first = dg.execute_job(dg.reconstructable(document_batch_job), instance=instance,
                           tags={"dagster/partition": key, **SENSOR_TAGS})
    assert not first.success
    _run_failure_sensor(instance, first.run_id)  # no Dagster retry: the files go back to the queue, in backoff
    monkeypatch.setattr(DocumentPipeline, "embed_batch", embed)  # the cause is fixed
    return key, first


def _reexecute(instance, parent: dg.JobExecutionResult, options: dg.ReexecutionOptions, **tags):
    parent_tags = instance.get_run_by_id(parent.run_id).tags
    return dg.execute_job(dg.reconstructable(document_batch_job), instance=instance, raise_on_error=False,
                          tags={**parent_tags, **tags}, reexecution_options=options)


def _failure_message(result) -> str:
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    return failure.step_failure_data.user_failure_data.description


def test_reexecution_from_failure_redrives_the_files_handed_back_to_the_queue(instance, database, db, notes,
                                                                              monkeypatch):
    key, first = _first_run_fails_at_embedding(instance, database, notes, monkeypatch)
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"queued"}

    again = _reexecute(instance, first, dg.ReexecutionOptions.from_failure(first.run_id, instance))

    assert again.success
    rows = table(db, "SELECT * FROM ingestion_runs ORDER BY file_id")
    assert {(r["status"], r["owner"], r["attempts"]) for r in rows} == {("succeeded", first.run_id, 2)}
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == 2
    promoted = [e for e in again.all_events if e.is_step_materialization and e.step_key == "promoted_documents"]
    assert promoted[0].step_materialization_data.materialization.metadata["promoted_now"].value == 2


@pytest.mark.integration
def test_reexecution_of_a_batch_another_run_finished_fails_says_why_and_leaves_the_catalog_as_the_data_is(
        instance, database, db, notes, monkeypatch):
    key, first = _first_run_fails_at_embedding(instance, database, notes, monkeypatch)
    db.execute("UPDATE ingestion_runs SET next_attempt_at = now()")  # the backoff has passed
    relaunched = dg.execute_job(dg.reconstructable(document_batch_job), instance=instance,
                                tags={"dagster/partition": key, **SENSOR_TAGS})  # upload_sensor's relaunch
    assert relaunched.success

    for options in (dg.ReexecutionOptions.from_failure(first.run_id, instance),
                    dg.ReexecutionOptions(parent_run_id=first.run_id)):  # from failure, and all steps
        again = _reexecute(instance, first, options)
        assert not again.success  # not green on nothing
        message = _failure_message(again)
        assert message.startswith(f"nothing to do in partition {key}: 2 succeeded") and "everything is done" in message
        # ...while every step it ran materialised, saying so (the UI shows the partition materialised, not failed),
        # and the checks looked at the batch as it is (their real results, not "execution failed")
        materialized = {e.step_key: e.step_materialization_data.materialization.metadata
                        for e in again.all_events if e.is_step_materialization}
        started = {e.step_key for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_START}
        ran = started - CHECK_STEPS  # the asset steps (a graph asset's: `document_chunks.plan_chunk_parts`...)
        assert {step.split(".")[0] for step in materialized} == {step.split(".")[0] for step in ran}, (
            materialized.keys(), ran)
        assert "promoted_documents" in ran
        # the run fails at its last step, the batch checks, once they have evaluated
        [failed_step] = [e.step_key for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        assert failed_step == "promoted_batch_checks" and failed_step in started
        assert all(m["nothing_to_do"].value == message for m in materialized.values())
        assert materialized["promoted_documents"]["promoted_now"].value == 0
        checks = {c.check_name: c for c in again.get_asset_check_evaluations()}
        assert {checks[name].partition for name in BATCH_CHECKS} == {key}  # the batch's own results
        assert checks["one_active_version_per_document"].passed and checks["no_failed_files"].passed, checks
        assert checks["embeddings_match_chunks"].passed and checks["no_version_without_chunks"].passed
        # re-executed from failure, the run starts at the checks: red again, saying what the batch holds now, and
        # its failure hands no file back and counts no attempt (it claimed none)
        once_more = _reexecute(instance, again, dg.ReexecutionOptions.from_failure(again.run_id, instance))
        assert not once_more.success and _failure_message(once_more) == message
        assert {e.step_key for e in once_more.all_events if e.event_type == dg.DagsterEventType.STEP_START} == {
            "promoted_batch_checks"}
        assert table_for_run(instance.get_run_by_id(once_more.run_id), instance) is None
    # files due again since (handed back): the checks' re-execution says to re-execute all steps, and does no work
    db.execute("UPDATE ingestion_runs SET status = 'queued', owner = NULL")
    due = _reexecute(instance, once_more, dg.ReexecutionOptions.from_failure(once_more.run_id, instance))
    assert not due.success and _failure_message(due).startswith(
        f"files are due again in partition {key}: re-execute all steps"), _failure_message(due)
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"queued"}
    db.execute("UPDATE ingestion_runs SET status = 'succeeded'")
    assert {r["dagster_run_id"] for r in table(db, "SELECT dagster_run_id FROM ingestion_runs")} == {
        relaunched.run_id}


@pytest.mark.integration
def test_a_persons_run_replays_dead_letters_but_failed_files_only_when_asked(instance, database, db, notes,
                                                                             monkeypatch, tmp_path):
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "")  # one attempt: a failed run dead-letters its files
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not a PDF")
    notes = [*notes, broken]
    key, first = _first_run_fails_at_embedding(instance, database, notes, monkeypatch)
    states = {r["config"]["filename"]: r["status"] for r in table(db, "SELECT * FROM ingestion_runs")}
    assert states == {"note-0.md": "dead_letter", "note-1.md": "dead_letter", "broken.pdf": "failed"}

    again = _reexecute(instance, first, dg.ReexecutionOptions(parent_run_id=first.run_id))
    assert again.success
    rows = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert rows["note-0.md"]["status"] == rows["note-1.md"]["status"] == "succeeded"
    assert (rows["broken.pdf"]["status"], rows["broken.pdf"]["attempts"]) == ("failed", 1)  # not replayed

    nothing = _reexecute(instance, first, dg.ReexecutionOptions(parent_run_id=first.run_id))
    assert not nothing.success
    message = _failure_message(nothing)
    assert "1 failed (pdf_corrupt: PDF is corrupt" in message and "ingestion/replay_failed=true" in message

    asked = _reexecute(instance, first, dg.ReexecutionOptions(parent_run_id=first.run_id),
                       **{"ingestion/replay_failed": "true"})
    assert asked.success  # the file was worked on again (and failed again, for the same reason)
    [pdf] = table(db, "SELECT * FROM ingestion_runs WHERE config->>'filename' = 'broken.pdf'")
    assert (pdf["status"], pdf["attempts"]) == ("failed", 2)


def test_reexecuting_a_failed_threshold_fails_and_the_check_stays_failed(instance, database, db, tmp_path):
    """Before: "Re-execute from failure" went green and turned the failed blocking check into Passed, while the
    upload stayed failed and nothing was promoted."""
    from ingestion_pipeline.defs.partitions import metric_uploads
    from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export
    from ingestion_pipeline_tests.defs.test_metric_assets import counts, upload_row
    from ingestion_pipeline_tests.defs.test_metric_assets import submit as submit_export
    from ingestion_pipeline_tests.helpers import metric_upload_job

    path = write_export(tmp_path / "e.csv", "tiktok", with_invalid_share(daily_rows(2, 2, 5, 10), 0.15))
    submitted = submit_export(database, tmp_path, path, platform="tiktok")
    instance.add_dynamic_partitions(metric_uploads.name, [submitted.partition_key])
    job = dg.reconstructable(metric_upload_job)
    first = dg.execute_job(job, instance=instance, raise_on_error=False,
                           tags={"dagster/partition": submitted.partition_key,
                                 "dagster/sensor_name": "metric_upload_sensor"})
    assert not first.success
    before = counts(db)

    for options in (dg.ReexecutionOptions.from_failure(first.run_id, instance),
                    dg.ReexecutionOptions(parent_run_id=first.run_id)):
        again = dg.execute_job(job, instance=instance, raise_on_error=False, reexecution_options=options,
                               tags=instance.get_run_by_id(first.run_id).tags)
        assert not again.success
        message = _failure_message(again)
        assert "1 failed (threshold_missed: validation threshold missed:" in message and "--force-partial" in message
        evaluations = [e.asset_check_evaluation_data for e in again.all_events
                       if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
        assert not any(e.passed for e in evaluations)  # the failed blocking check is never turned into Passed
        assert not [e for e in again.all_events if e.is_step_materialization]
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["error_code"], upload["attempts"]) == ("failed", "threshold_missed", 1)
    assert counts(db) == before


@pytest.mark.integration  # two runs and a re-execution (~17 s)
def test_a_persons_reexecution_from_an_assembly_in_one_process_does_the_batchs_work_there(
        instance, database, db, notes, monkeypatch):
    """In one process a document step's plan does the batch and its assembly reports; a run that died between the
    two handed its files back, so a person's re-execution from failure, which starts at the assembly, claims and
    does the batch's work there rather than running green on the parent's findings."""
    from ingestion_pipeline.defs.documents import assets

    submit(database, "acme", *notes)
    [key] = batch_queued(database)
    instance.add_dynamic_partitions(document_batches.name, [key])
    latest = assets._latest_outcomes

    def died_at_the_assembly(parts):
        raise RuntimeError("the run's process went away")

    monkeypatch.setattr(assets, "_latest_outcomes", died_at_the_assembly)
    first = dg.execute_job(dg.reconstructable(document_batch_job), instance=instance,
                           tags={"dagster/partition": key, **SENSOR_TAGS})
    assert not first.success
    _run_failure_sensor(instance, first.run_id)  # the files go back to the queue
    assert {r["owner"] for r in table(db, "SELECT owner FROM ingestion_runs")} == {None}
    monkeypatch.setattr(assets, "_latest_outcomes", latest)
    db.execute("UPDATE ingestion_runs SET next_attempt_at = now()")  # the backoff has passed

    again = _reexecute(instance, first, dg.ReexecutionOptions.from_failure(first.run_id, instance))
    assert again.success
    started = {e.step_key for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_START}
    assert "document_elements.assemble_units" in started and "document_elements.plan_units" not in started
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"succeeded"}
    assert table(db, "SELECT count(*) AS n FROM document_versions WHERE is_active")[0]["n"] == 2
