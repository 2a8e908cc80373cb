"""An exception no rule foresaw, raised while claiming or promoting a metric upload, fails the upload once.

Before, only staging classified such exceptions: one raised in the claim or the promotion failed the Dagster
run, and the run-failure path retried it as transient until it was dead-lettered (four attempts, one cause).
The exception is injected into the real step (the cause in production is a bug or an input no rule knows);
the run, the ledger and the run-failure finalisation are the real ones.
"""

import dagster as dg
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.metrics import pipeline
from ingestion_pipeline.runtime.finalization import finalize_failed_run
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline_tests.defs.test_metric_assets import counts, run_upload, submit, upload_row
from ingestion_pipeline_tests.helpers import table


class Unforeseen(Exception):
    """Stands for whatever the step's code did not expect."""


def _raise(*_args, **_kwargs):
    raise Unforeseen("no rule covers this input")


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.mark.parametrize("step", ["verify", "promote_upload"])
def test_an_unforeseen_error_in_claim_or_promotion_fails_the_upload_once(step, monkeypatch, instance, database,
                                                                          db, tmp_path):
    path = write_export(tmp_path / "export.csv", "meta", daily_rows(1, 1, 2, 3))
    submitted = submit(database, tmp_path, path)
    before = counts(db)
    # the claim checks the stored file (the upload store's verify); the promotion is the pipeline's
    monkeypatch.setattr(LocalUploadStore if step == "verify" else pipeline, step, _raise)

    result = run_upload(instance, submitted.partition_key)

    assert not result.success
    upload = upload_row(db, submitted.upload_id)
    assert (upload["status"], upload["error_code"], upload["attempts"]) == ("failed", "unexpected_error", 1)
    assert "Unforeseen: no rule covers this input" in upload["error"]
    # the run-failure path finds nothing unfinished: no second attempt, no dead letter
    run = instance.get_run_by_id(result.run_id)
    assert finalize_failed_run(instance, database, run, load_settings().reliability) == []
    events = [r["event"] for r in table(
        db, "SELECT event FROM ledger_history WHERE kind = 'metric_upload' AND item_id = %s ORDER BY history_id",
        submitted.upload_id)]
    assert "retry_scheduled" not in events and "dead_lettered" not in events and events[-1] == "failed", events
    assert counts(db) == before  # a failed promotion wrote nothing (its transaction rolled back)
