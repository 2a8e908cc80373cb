"""A step's files in two lanes: one document's files in order, in one lane; outcomes in the batch's order."""

import threading
import time

import psycopg
import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.progress import Progress
from ingestion_pipeline.documents.pipeline import FileOutcome
from ingestion_pipeline_tests.helpers import pipeline_for

ROWS = [{"file_id": 1, "doc_id": 10}, {"file_id": 2, "doc_id": 20}, {"file_id": 3, "doc_id": 10},
        {"file_id": 4, "doc_id": 30}, {"file_id": 5, "doc_id": 40}]


def test_a_documents_files_run_in_order_in_one_lane_while_other_documents_run_beside_them(database):
    pipeline = pipeline_for(database)
    pipeline.progress = Progress("test", len(ROWS))
    spans: dict[int, tuple[float, float, str]] = {}

    def work(row: dict) -> FileOutcome:
        start = time.monotonic()
        time.sleep(0.4 if row["file_id"] == 1 else 0.05)  # the first version is slow: the second must wait
        spans[row["file_id"]] = (start, time.monotonic(), threading.current_thread().name)
        return FileOutcome(row["file_id"], f"file-{row['file_id']}", "running")

    outcomes = pipeline.in_lanes(ROWS, work, 2)

    assert [o.file_id for o in outcomes] == [1, 2, 3, 4, 5]  # the batch's order, whatever finished first
    assert spans[3][0] >= spans[1][1] and spans[3][2] == spans[1][2]  # document 10: version 1, then 2
    assert spans[2][0] < spans[1][1]  # another document ran while the slow file did
    assert len({name for _, _, name in spans.values()}) == 2
    assert pipeline.progress.files_done == len(ROWS)


def _file_ids_and_threads(database: Database, lanes: int) -> tuple[list[int], set[str]]:
    """ROWS through ``_in_lanes``: the outcomes' file ids, and the names of the threads that did the work."""
    pipeline = pipeline_for(database)
    pipeline.progress = Progress("test", len(ROWS))
    threads = set()

    def work(row: dict) -> FileOutcome:
        threads.add(threading.current_thread().name)
        return FileOutcome(row["file_id"], "f", "running")

    return [o.file_id for o in pipeline.in_lanes(ROWS, work, lanes)], threads


def test_one_lane_works_on_the_steps_own_thread(database):
    file_ids, threads = _file_ids_and_threads(database, 1)
    assert file_ids == [1, 2, 3, 4, 5]
    assert threads == {threading.current_thread().name}


def test_a_pool_of_one_connection_gets_one_lane(database_url):
    """A lane waiting for the pool's only connection could time out: one connection, one lane."""
    with Database(database_url, max_size=1) as small:
        file_ids, threads = _file_ids_and_threads(small, 2)
        assert file_ids == [1, 2, 3, 4, 5]
    assert threads == {threading.current_thread().name}


def test_an_error_of_the_database_stops_the_lanes_and_reaches_the_step(database):
    pipeline = pipeline_for(database)
    pipeline.progress = Progress("test", len(ROWS))
    worked = []

    def work(row: dict) -> FileOutcome:
        if row["file_id"] == 2:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        time.sleep(0.2)
        worked.append(row["file_id"])
        return FileOutcome(row["file_id"], "f", "running")

    with pytest.raises(psycopg.OperationalError):  # the step is retried; the files stay held
        pipeline.in_lanes(ROWS, work, 2)
    assert 5 not in worked  # files not begun when the error came are left for the retry


def test_the_number_of_lanes_is_a_setting(database, monkeypatch):
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.defs.resources import SettingsResource

    monkeypatch.delenv("INGESTION_BATCH_LANES", raising=False)
    assert pipeline_for(database).lanes == 2
    monkeypatch.setenv("INGESTION_BATCH_LANES", "3")
    assert pipeline_for(database).lanes == 3
    assert SettingsResource(batch_lanes=1).get().batch.lanes == 1
    for bad in ("0", "two"):
        monkeypatch.setenv("INGESTION_BATCH_LANES", bad)
        expected = f"INGESTION_BATCH_LANES must be a whole number of at least 1, got '{bad}'"
        with pytest.raises(ValueError, match=expected):
            load_settings()
