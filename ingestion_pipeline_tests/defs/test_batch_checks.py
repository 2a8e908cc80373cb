"""The batch checks (``defs/documents/batch_checks.py``): one result per batch, and executable alone for a batch."""

import dagster as dg
import pytest

from ingestion_pipeline import definitions
from ingestion_pipeline.core.run_tags import DOCUMENT_JOB
from ingestion_pipeline.defs.documents.batch_checks import BATCH_CHECKS, PROMOTED
from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch, submit
from ingestion_pipeline_tests.helpers import test_resources as resources_for_a_run


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.check_name: c for c in result.get_asset_check_evaluations() if c.check_name in BATCH_CHECKS}


def test_each_batch_has_its_own_results_and_its_checks_run_alone_for_it(instance, database, tmp_path):
    """Two batches, one with a file that fails: each batch's checks are evaluated on its own partition, and the
    checks executed alone for the first batch (as the UI's Execute on a partition does) after the second ran give
    the first batch's results again, with no asset step."""
    good, blank = tmp_path / "good.md", tmp_path / "blank.txt"
    good.write_text("# Ferries\n\nThe ferry leaves at nine and returns at five.\n")
    blank.write_text("   \n\n  ")
    submit(database, "acme", good, blank)
    [first] = batch_queued(database)
    first_run = materialize_batch(instance, first)
    other = tmp_path / "other.md"
    other.write_text("# Trains\n\nThe train leaves at ten.\n")
    submit(database, "beta", other)
    [second] = batch_queued(database)
    second_run = materialize_batch(instance, second)

    for result, key, failed_files in ((first_run, first, False), (second_run, second, True)):
        checks = _checks(result)
        assert set(checks) == set(BATCH_CHECKS) and {c.partition for c in checks.values()} == {key}
        assert checks["no_failed_files"].passed is failed_files
        assert all(checks[name].passed for name in BATCH_CHECKS if name != "no_failed_files")
    assert _checks(first_run)["no_failed_files"].description == \
        "files failed in this batch: 1 — failed: file_whitespace_only (1)"

    job = definitions.defs().resolve_job_def(DOCUMENT_JOB)
    alone = job.get_subset(asset_selection=set(),
                           asset_check_selection={dg.AssetCheckKey(PROMOTED, name) for name in BATCH_CHECKS})
    result = alone.execute_in_process(instance=instance, tags={"dagster/partition": first},
                                      resources=resources_for_a_run())
    assert result.success and not [e for e in result.all_events if e.is_step_materialization]
    checks = _checks(result)
    assert {c.partition for c in checks.values()} == {first} and not checks["no_failed_files"].passed
    assert checks["one_active_version_per_document"].passed


def test_a_batch_with_nothing_promoted_is_a_warning_that_says_so_never_a_pass(instance, database, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("   \n\n  ")
    submit(database, "acme", blank)
    [key] = batch_queued(database)
    checks = _checks(materialize_batch(instance, key))
    for name in BATCH_CHECKS:
        assert not checks[name].passed and checks[name].severity == dg.AssetCheckSeverity.WARN
    assert checks["embeddings_match_chunks"].description == "not checked: no file of this batch is promoted"
