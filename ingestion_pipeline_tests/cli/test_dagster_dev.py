"""`make dev` for real: `ingestion-pipeline dev` (webserver + daemon) picks up a queued upload through
upload_sensor, runs the batch and finalizes the ledger, with no `process` call."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ingestion_pipeline.core.settings import project_root
from ingestion_pipeline_tests.helpers import answers, stop_process_group, submit, table


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dev_daemon_ingests_a_queued_upload(database, project_dagster_home, db, corpus_dir, tmp_path):
    [queued] = submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    [bad] = submit(database, "acme", corpus_dir / "broken" / "password.pdf")
    port, api_port = _free_port(), _free_port()
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen(
        ["env", "--default-signal=INT", str(Path(sys.executable).parent / "ingestion-pipeline"), "dev",
         "--port", str(port), "--api-port", str(api_port), "--json"],
        cwd=project_root(), env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 420
        statuses: dict = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-4000:]
            rows = table(db, "SELECT file_id, status, error, dagster_run_id FROM ingestion_runs ORDER BY file_id")
            statuses = {r["file_id"]: r for r in rows}
            if all(r["status"] in ("succeeded", "failed") for r in rows):
                break
            time.sleep(3)
        assert statuses[queued.file_id]["status"] == "succeeded", (tmp_path / "dev.log").read_text()[-4000:]
        assert statuses[bad.file_id]["status"] == "failed"
        assert statuses[bad.file_id]["error"].startswith("PDF is password-protected")
        assert statuses[queued.file_id]["dagster_run_id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as response:
            assert response.status == 200
        # the UI's resource page says which variable configures the database, and never shows its value
        postgres = _graphql(port, _RESOURCE, {"selector": {
            "repositoryLocationName": "ingestion_pipeline", "repositoryName": "__repository__",
            "resourceName": "postgres"}})["topLevelResourceDetailsOrError"]
        values = {v["key"]: v for v in postgres["configuredValues"]}
        assert values["database_url"] == {"key": "database_url", "value": "DATABASE_URL", "type": "ENV_VAR"}
        assert os.environ["DATABASE_URL"] not in json.dumps(postgres)
        started = next(json.loads(line) for line in (tmp_path / "dev.log").read_text().splitlines()
                       if line.startswith('{"ui"'))
        assert started["ui"] == f"http://127.0.0.1:{port}"
        # the HTTP API runs next to them (development mode without JWT_SECRET) on the same database
        assert started["api"] == f"http://127.0.0.1:{api_port}" and started["api_auth"].startswith("off")
        with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/v1/ingestion-runs?tenant_id=acme",
                                    timeout=10) as response:
            assert json.loads(response.read())["total"] == 2
    finally:
        stop_process_group(proc)
        log.close()


_RESOURCE = """
query($selector: ResourceSelector!) {
  topLevelResourceDetailsOrError(resourceSelector: $selector) {
    ... on ResourceDetails { name configuredValues { key value type } }
  }
}"""


def _wait(condition, timeout: float, proc: subprocess.Popen, log: Path, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        value = condition()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-4000:]}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_daemon_recovers_a_killed_worker_and_shares_the_queue_with_process(
        database, project_dagster_home, db, corpus_dir, tmp_path):
    """`make dev` for real, when things go wrong:

    1. the run worker is SIGKILLed mid-embedding (a failpoint marks the moment); the intake service's janitor sees
       its heartbeat stop and fails the run; the daemon's run retry re-executes it from failure, as the
       same owner, and the retry finishes the files from the staging tables;
    2. two `ingestion-pipeline process` and the daemon's sensors work the same queue at once: every file is
       claimed once and processed once.
    """
    from dagster import DagsterInstance, DagsterRunStatus

    markers = tmp_path / "failpoints"
    markers.mkdir()
    env = {**os.environ, "INGESTION_LEASE_SECONDS": "3", "INGESTION_FAILPOINT": "embed.unit",
           "INGESTION_ALLOW_FAILPOINTS": "1", "INGESTION_FAILPOINT_DIR": str(markers),
           "INGESTION_BATCH_MAX_FILES": "3"}
    [killed] = submit(database, "acme", corpus_dir / "documents" / "norwich-city.txt")
    port = _free_port()
    log_path = tmp_path / "dev.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        ["env", "--default-signal=INT", str(Path(sys.executable).parent / "ingestion-pipeline"), "dev",
         "--port", str(port), "--api-port", "0"],
        cwd=project_root(), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        marker = _wait(lambda: next(markers.glob("*.embed.unit"), None), 240, proc, log_path, "the failpoint")
        worker_pid = int(marker.name.split(".")[0])
        os.kill(worker_pid, signal.SIGKILL)  # the run worker dies between two committed embedding units

        row = _wait(lambda: table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s AND status = 'succeeded'",
                                  killed.file_id), 300, proc, log_path, "the retry to finish the file")[0]
        retry_id = row["dagster_run_id"]
        with DagsterInstance.from_config(str(project_dagster_home)) as instance:
            first = instance.get_run_by_id(row["owner"])  # the claim stays with the root run
            # the file is promoted before the run ends (the asset checks come after): wait for the run's end
            _wait(lambda: instance.get_run_by_id(retry_id).is_finished, 120, proc, log_path, "the retry run's end")
            statuses = {r.run_id: r.status for r in instance.get_run_group(first.run_id)[1]}
        assert statuses[first.run_id] == DagsterRunStatus.FAILURE
        assert retry_id != first.run_id and statuses[retry_id] == DagsterRunStatus.SUCCESS
        events = [r["event"] for r in table(db, """SELECT event FROM ledger_history WHERE item_id = %s
                                                   AND kind = 'document' ORDER BY history_id""", killed.file_id)]
        assert events == ["claimed", "succeeded"] and row["attempts"] == 1  # continued, not started over

        notes = []
        for i in range(12):
            note = tmp_path / f"shared-{i}.md"
            note.write_text(f"# Shared {i}\n\nFile {i} of the queue that three workers share.\n")
            notes.append(note)
        queued = submit(database, "acme", *notes)
        cli = [str(Path(sys.executable).parent / "ingestion-pipeline"), "process"]
        workers = [subprocess.Popen(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(2)]
        for worker in workers:
            worker.wait(600)
        ids = [q.file_id for q in queued]
        _wait(lambda: table(db, "SELECT count(*) AS n FROM ingestion_runs WHERE file_id = ANY(%s) AND status = "
                                "'succeeded'", ids)[0]["n"] == len(ids), 300, proc, log_path, "the shared queue")
        claims = table(db, """SELECT item_id, count(*) FILTER (WHERE event IN ('claimed', 'taken_over')) AS claims,
                                     count(*) FILTER (WHERE event = 'succeeded') AS successes
                                FROM ledger_history WHERE kind = 'document' AND item_id = ANY(%s) GROUP BY item_id""",
                       ids)
        assert len(claims) == len(ids) and {(c["claims"], c["successes"]) for c in claims} == {(1, 1)}
        assert len(table(db, """SELECT * FROM document_versions v JOIN ingestion_runs r
                                 ON r.file_id = v.file_id WHERE r.file_id = ANY(%s)""", ids)) == len(ids)
        runners = {r["dagster_run_id"] for r in table(db, "SELECT dagster_run_id FROM ingestion_runs WHERE "
                                                          "file_id = ANY(%s)", ids)}
        assert len(runners) >= 2  # the work really was shared
    finally:
        stop_process_group(proc)
        log.close()



def _graphql(port: int, query: str, variables: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                     data=json.dumps({"query": query, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


_LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
_ASSETS = ["raw_documents", "document_elements", "document_chunks", "document_embeddings", "promoted_documents"]


_REEXECUTE = """
mutation($params: ReexecutionParams!) {
  launchPipelineReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}"""
_STALE = """
query($partition: String) {
  assetNodeOrError(assetKey: {path: ["promoted_documents"]}) {
    ... on AssetNode { staleStatus(partition: $partition) staleCauses(partition: $partition) { reason } }
  }
}"""


_PARTITION_STATUSES = """
query($asset: String!) {
  assetNodeOrError(assetKey: {path: [$asset]}) {
    ... on AssetNode {
      assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } }
    }
  }
}"""


_CHECK_EXECUTIONS = """
query($asset: String!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: {path: [$asset]}, checkName: $check, partition: $partition, limit: 10) {
    runId status evaluation { success severity description }
  }
}"""


_LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


def _ended(instance, run_id: str, proc: subprocess.Popen, log_path: Path, what: str):
    """The run ``run_id`` once it has ended."""
    def finished():
        run = instance.get_run_by_id(run_id)
        return run if run is not None and run.is_finished else None

    return _wait(finished, 300, proc, log_path, f"{what} {run_id}")


def _execute_checks(port: int, asset: str, checks: list[str], partition: str, instance, proc, log_path: Path):
    """What the UI's "Execute" on an asset's checks for a partition launches: a run of the checks alone (the
    implicit asset job, no asset selected); the run once it has ended."""
    launched = _graphql(port, _LAUNCH_RUN, {"params": {
        "selector": {"repositoryLocationName": "ingestion_pipeline", "repositoryName": "__repository__",
                     "jobName": "__ASSET_JOB", "assetSelection": [],
                     "assetCheckSelection": [{"assetKey": {"path": [asset]}, "name": name} for name in checks]},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}}})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return _ended(instance, launched["run"]["runId"], proc, log_path, "the checks' run")


def _check_executions(port: int, asset: str, check: str, partition: str | None) -> list[dict]:
    """The check's executions for the partition, newest first, as the asset's Checks tab lists them."""
    return _graphql(port, _CHECK_EXECUTIONS, {"asset": asset, "check": check,
                                              "partition": partition})["assetCheckExecutions"]


def _reexecute(port: int, parent_run_id: str, strategy: str, instance, proc, log_path: Path):
    """What the UI's "Re-execute" (from failure, or all steps) launches; the re-execution once it has ended."""
    launched = _graphql(port, _REEXECUTE, {"params": {"parentRunId": parent_run_id, "strategy": strategy,
                                                      "useParentRunTags": True}})["launchPipelineReexecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return _ended(instance, launched["run"]["runId"], proc, log_path, "re-execution")


def _step_failures(instance, run_id: str) -> list[str]:
    from dagster import DagsterEventType

    return [e.dagster_event.step_failure_data.user_failure_data.description
            for e in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE)]


def _backfill(port: int, partition_key: str, instance, proc, log_path: Path, *, succeeds: bool = True):
    """What the UI's "Materialize selected" over a partition launches: an asset backfill, run by the daemon.
    Returns the backfill's run once it has ended (the backfill itself is marked done a daemon tick later)."""
    from dagster import DagsterRunStatus, RunsFilter

    launched = _graphql(port, _LAUNCH_BACKFILL, {"params": {
        "partitionNames": [partition_key], "assetSelection": [{"path": [a]} for a in _ASSETS]}})
    result = launched["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", result
    backfill_id = result["backfillId"]

    def finished():
        runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
        return runs[0] if runs and runs[0].is_finished else None

    run = _wait(finished, 420, proc, log_path, f"the run of backfill {backfill_id}")
    expected = DagsterRunStatus.SUCCESS if succeeds else DagsterRunStatus.FAILURE
    assert run.status == expected and run.tags.get("dagster/partition") == partition_key
    return run


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ui_backfill_after_a_pipeline_change_reindexes_and_then_says_there_is_nothing_to_do(
        database_url, project_dagster_home, db, corpus_dir, tmp_path, monkeypatch):
    """Through Dagster's GraphQL API, as the UI does it. A batch with a failed file shows it as a warning. After
    a chunker setting change (no code changed: the batch stays fresh in Dagster's eyes, its code versions are
    the code's) a backfill (`launchPartitionBackfill`, run by the daemon) re-indexes its documents by the
    pipeline fingerprint; a second backfill, and
    re-executions of it from failure and of all steps (`launchPipelineReexecution`), have nothing to do: each
    fails and says why, none runs green on nothing, and the catalog still shows the partition materialised and
    the checks' real results. A metric upload under its threshold, run by the daemon,
    re-executed from failure: the run fails and the blocking check is never turned into Passed."""
    from contextlib import ExitStack

    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export

    cli = str(Path(sys.executable).parent / "ingestion-pipeline")
    docs = corpus_dir / "documents"
    blank = tmp_path / "blank.txt"
    blank.write_text("   \n\n  ")
    ingested = subprocess.run([cli, "ingest", str(docs / "codeblock.md"), str(docs / "simple.docx"), str(blank),
                               "--tenant", "acme"], capture_output=True, env=os.environ.copy(), timeout=600)
    assert ingested.returncode in (0, 1), ingested.stderr[-2000:]
    [blank_row] = table(db, "SELECT status, error_code FROM ingestion_runs WHERE config->>'filename' = 'blank.txt'")
    assert blank_row == {"status": "failed", "error_code": "file_whitespace_only"}
    [key] = {r["partition_key"] for r in table(db, "SELECT partition_key FROM ingestion_runs")}
    v1 = {v["doc_id"]: v for v in table(db, "SELECT * FROM document_versions")}
    export = write_export(tmp_path / "e.csv", "tiktok", with_invalid_share(daily_rows(2, 2, 5, 10), 0.15))
    subprocess.run([cli, "metrics", "submit", str(export), "--workspace", "acme", "--platform", "tiktok"],
                   check=True, capture_output=True, env=os.environ.copy(), timeout=120)

    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "60")  # the deployment's chunker setting changed
    port = _free_port()
    log_path = tmp_path / "dev.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        ["env", "--default-signal=INT", cli, "dev", "--port", str(port), "--api-port", "0"],
        cwd=project_root(), env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    stack = ExitStack()
    try:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5):
                    return True
            except OSError:
                return False

        _wait(ready, 240, proc, log_path, "the webserver")
        instance = stack.enter_context(DagsterInstance.from_config(str(project_dagster_home)))
        stale = _graphql(port, _STALE, {"partition": key})["assetNodeOrError"]
        # no code changed, so Dagster's staleness (the code versions, the same on every host) stays FRESH; the
        # deployment's new chunker setting is the pipeline fingerprint's, which a person's backfill acts on
        assert stale["staleStatus"] == "FRESH", stale
        _backfill(port, key, instance, proc, log_path)
        reindexed = table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex' ORDER BY file_id")
        assert len(reindexed) == 2 and {r["status"] for r in reindexed} == {"succeeded"}, reindexed
        active = {v["doc_id"]: v for v in table(db, "SELECT * FROM document_versions WHERE is_active")}
        for doc_id, old in v1.items():
            assert active[doc_id]["version_number"] == 2
            assert active[doc_id]["pipeline_fingerprint"] != old["pipeline_fingerprint"]

        assert _graphql(port, _STALE, {"partition": key})["assetNodeOrError"]["staleStatus"] == "FRESH"
        executions = _check_executions(port, "promoted_documents", "no_failed_files", key)  # the batch's own
        failed_files = executions[0]  # the backfill's run: the failed file is still a warning
        assert failed_files["evaluation"] == {"success": False, "severity": "WARN",
                                              "description": "files failed in this batch: 1 — "
                                                             "failed: file_whitespace_only (1)"}, failed_files

        second = _backfill(port, key, instance, proc, log_path, succeeds=False)  # nothing changed since
        [message] = _step_failures(instance, second.run_id)
        assert message.startswith(f"nothing to do in partition {key}: 1 failed (file_whitespace_only"), message
        assert "4 succeeded" in message and "ingestion/replay_failed=true" in message
        for strategy in ("FROM_FAILURE", "ALL_STEPS"):
            again = _reexecute(port, second.run_id, strategy, instance, proc, log_path)
            assert again.status == DagsterRunStatus.FAILURE and again.parent_run_id == second.run_id
            assert again.tags.get("dagster/partition") == key
            assert _step_failures(instance, again.run_id) == [message], strategy
        assert len(table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex'")) == 2
        assert len(table(db, "SELECT * FROM document_versions")) == 4
        # ...while the catalog stays as the data is: the partition materialised in every asset, failed in none,
        # and each check's newest execution a real evaluation of the batch (never "execution failed" over it)
        for asset in _ASSETS:
            node = _graphql(port, _PARTITION_STATUSES, {"asset": asset})["assetNodeOrError"]
            statuses = node["assetPartitionStatuses"]
            assert key in statuses["materializedPartitions"], (asset, statuses)
            assert key not in statuses["failedPartitions"], (asset, statuses)
        integrity = ("one_active_version_per_document", "embeddings_match_chunks", "no_version_without_chunks")
        for check in integrity:
            newest = _check_executions(port, "promoted_documents", check, key)[0]
            assert newest["runId"] == again.run_id and newest["status"] == "SUCCEEDED", (check, newest)
            assert newest["evaluation"]["success"], (check, newest)
        newest = _check_executions(port, "promoted_documents", "no_failed_files", key)[0]
        assert newest["runId"] == again.run_id and newest["evaluation"] == failed_files["evaluation"], newest
        # the batch's checks executed alone, as the UI's "Execute" does: a green run, the same real results
        alone = _execute_checks(port, "promoted_documents", [*integrity, "no_failed_files"], key, instance, proc,
                                log_path)
        assert alone.status == DagsterRunStatus.SUCCESS, _step_failures(instance, alone.run_id)
        for check in integrity:
            newest = _check_executions(port, "promoted_documents", check, key)[0]
            assert newest["runId"] == alone.run_id and newest["evaluation"]["success"], (check, newest)
        newest = _check_executions(port, "promoted_documents", "no_failed_files", key)[0]
        assert newest["runId"] == alone.run_id and newest["evaluation"] == failed_files["evaluation"], newest

        # the metric upload: metric_upload_sensor ran it; the blocking check failed it
        def metric_run_failed():
            runs = instance.get_runs(RunsFilter(job_name="metric_upload_job", statuses=[DagsterRunStatus.FAILURE]))
            return runs[0] if runs else None

        metric_run = _wait(metric_run_failed, 300, proc, log_path, "the metric upload's run")
        again = _reexecute(port, metric_run.run_id, "FROM_FAILURE", instance, proc, log_path)
        assert again.status == DagsterRunStatus.FAILURE
        [message] = _step_failures(instance, again.run_id)
        assert "1 failed (threshold_missed: validation threshold missed:" in message, message
        executions = _check_executions(port, "staged_metric_rows", "valid_row_threshold",
                                       metric_run.tags["dagster/partition"])  # the upload's own
        assert executions and not any(e["evaluation"]["success"] for e in executions if e["evaluation"])
        assert "rows valid" in executions[-1]["evaluation"]["description"], executions  # the daemon's run's
    finally:
        stack.close()
        stop_process_group(proc)
        log.close()


_TERMINATE = """
mutation($runId: String!) {
  terminateRun(runId: $runId) {
    __typename
    ... on TerminateRunFailure { message }
    ... on PythonError { message }
  }
}"""


def _engine_messages(instance, run_id: str) -> list[str]:
    from dagster import DagsterEventType

    return [e.message for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dev_runs_start_in_workers_loaded_ahead_and_the_uis_terminate_cancels_one(
        database, project_dagster_home, db, corpus_dir, tmp_path):
    """The instance's run launcher (runtime/warm_run_launcher.py) under `make dev`: a run held mid-embedding is
    terminated from the UI (its worker gets the signal, the run and its file are canceled); the runs after it
    start in workers loaded ahead of them."""
    from dagster import DagsterInstance, DagsterRunStatus

    from ingestion_pipeline.runtime.warm_run_launcher import WORKER_TAG

    markers = tmp_path / "failpoints"
    markers.mkdir()
    env = {**os.environ, "INGESTION_FAILPOINT": "embed.unit", "INGESTION_ALLOW_FAILPOINTS": "1",
           "INGESTION_FAILPOINT_DIR": str(markers), "INGESTION_FAILPOINT_SLEEP": "600"}
    [held] = submit(database, "acme", corpus_dir / "documents" / "norwich-city.txt")
    port = _free_port()
    log_path = tmp_path / "dev.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        ["env", "--default-signal=INT", str(Path(sys.executable).parent / "ingestion-pipeline"), "dev",
         "--port", str(port), "--api-port", "0"],
        cwd=project_root(), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        marker = _wait(lambda: next(markers.glob("*.embed.unit"), None), 240, proc, log_path, "the failpoint")
        worker_pid = int(marker.name.split(".")[0])
        [row] = table(db, "SELECT dagster_run_id FROM ingestion_runs WHERE file_id = %s", held.file_id)
        with DagsterInstance.from_config(str(project_dagster_home)) as instance:
            first = instance.get_run_by_id(row["dagster_run_id"])
            assert json.loads(first.tags[WORKER_TAG])["pid"] == worker_pid  # the run runs in the launched worker
            result = _graphql(port, _TERMINATE, {"runId": first.run_id})["terminateRun"]
            assert result["__typename"] == "TerminateRunSuccess", result
            canceled = _wait(lambda: (r := instance.get_run_by_id(first.run_id)).is_finished and r, 120, proc,
                             log_path, "the terminated run's end")
            assert canceled.status == DagsterRunStatus.CANCELED
            _wait(lambda: not Path(f"/proc/{worker_pid}").exists()
                  or "zombie" in Path(f"/proc/{worker_pid}/status").read_text(), 60, proc, log_path,
                  "the terminated worker's exit")

            # the canceled run's file is canceled (a person stopped it); files after it run in loaded workers
            _wait(lambda: table(db, "SELECT status FROM ingestion_runs WHERE file_id = %s",
                                held.file_id)[0]["status"] == "canceled", 120, proc, log_path, "the file's cancel")
            later = []
            for i in range(2):
                note = tmp_path / f"after-{i}.md"
                note.write_text(f"# After {i}\n\nFile {i} submitted after a run was terminated.\n")
                [queued] = submit(database, "acme", note)
                later.append(queued.file_id)
                _wait(lambda queued=queued: table(db, "SELECT status FROM ingestion_runs WHERE file_id = %s",
                                                  queued.file_id)[0]["status"] == "succeeded", 300, proc, log_path,
                      f"file {i}")
            runs = [r["dagster_run_id"] for r in table(db, "SELECT dagster_run_id FROM ingestion_runs "
                                                           "WHERE file_id = ANY(%s) ORDER BY file_id", later)]
            assert len(set(runs)) == 2 and first.run_id not in runs
            readiness = []
            for run_id in runs:
                _wait(lambda run_id=run_id: instance.get_run_by_id(run_id).is_finished, 120, proc, log_path,
                      "the run's end")
                [said] = [m for m in _engine_messages(instance, run_id) if m.startswith("Run worker (pid ")]
                readiness.append(said)
            # on a loaded machine a spare may still be loading when its run comes; one was ready ahead
            assert any("before the run was handed to it" in m for m in readiness), readiness
    finally:
        stop_process_group(proc)
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_small_upload_is_launched_at_submit_and_the_sensor_does_not_launch_it_again(
        database, project_dagster_home, db, tmp_path):
    """The fast lane (runtime/fast_lane.py): `submit` beside `make dev` and the HTTP API launch a small batch's run
    through the webserver at once, as the sensor's run of that batch; the sensor's next loops launch no second."""
    from dagster import DagsterInstance, RunsFilter

    port, api_port = _free_port(), _free_port()
    log_path = tmp_path / "dev.log"
    log = log_path.open("w")
    cli = str(Path(sys.executable).parent / "ingestion-pipeline")
    proc = subprocess.Popen(["env", "--default-signal=INT", cli, "dev", "--port", str(port), "--api-port",
                             str(api_port)], cwd=project_root(), env=os.environ.copy(), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: answers(f"http://127.0.0.1:{port}/server_info"), 180, proc, log_path, "the webserver")
        _wait(lambda: answers(f"http://127.0.0.1:{api_port}/healthz"), 120, proc, log_path, "the API")
        by_cli = tmp_path / "by-cli.md"
        by_cli.write_text("# By the CLI\n\nSubmitted with ingestion-pipeline submit.\n")
        subprocess.run([cli, "submit", "--tenant", "acme", str(by_cli)], env=os.environ.copy(), check=True,
                       capture_output=True)
        body, boundary = _multipart("by-api.md", b"# By the API\n\nPosted to /v1/ingest.\n")
        request = urllib.request.Request(f"http://127.0.0.1:{api_port}/v1/ingest?tenant_id=acme", data=body,
                                         headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 202
        rows = _wait(lambda: (r := table(db, "SELECT partition_key, status FROM ingestion_runs ORDER BY file_id"))
                     and len(r) == 2 and all(x["status"] == "succeeded" for x in r) and r,
                     240, proc, log_path, "both uploads")
        time.sleep(12)  # two sensor-daemon loops after the files were done
        with DagsterInstance.from_config(str(project_dagster_home)) as instance:
            launched_by = []
            for row in rows:
                runs = instance.get_runs(RunsFilter(tags={"dagster/partition": row["partition_key"]}))
                assert len(runs) == 1, [r.tags for r in runs]  # never launched twice, whoever was first
                assert runs[0].tags["ingestion/run_class"] == "interactive"
                launched_by.append(runs[0].tags.get("ingestion/launched_by"))
                # the UI's "Launched by" names who did: the sensor, or the fast lane (no sensor's name borrowed)
                assert (runs[0].tags.get("dagster/sensor_name"), runs[0].tags.get("user")) in (
                    ("upload_sensor", None), (None, "ingestion-pipeline fast lane")), runs[0].tags
                assert (runs[0].tags.get("dagster/sensor_name") is None) == (launched_by[-1] == "fast_lane")
        # the sensor's loop may come first in the fraction of a second between a commit and its launch, rarely
        assert "fast_lane" in launched_by, launched_by
    finally:
        stop_process_group(proc)
        log.close()


def _multipart(filename: str, content: bytes) -> tuple[bytes, str]:
    boundary = "fastlaneboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
            "Content-Type: text/markdown\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, boundary
