"""The fast lane: a small batch's run launched as soon as its upload is committed, not at the sensor's next loop.

Dagster's sensor daemon evaluates sensors at most every 5 s, so a file submitted just after a tick waited up to
5 s for its run: the p95 of a small file's submit-to-searchable. `submit`, the HTTP API and the intake service
call ``launch_interactive`` right after they commit uploads. It plans the due batches exactly as
the sensors do (``documents/run_plan.plan_batch_runs``) and asks the Dagster webserver
(``INGESTION_DAGSTER_URL``, else the UI of a `make dev` on the same data folder) to launch, for each
``interactive`` one, the run the sensor would launch: the same partition and tags, the run key among them
(``ingestion/run_key``). The run says who launched it: ``ingestion/launched_by: fast_lane``, and Dagster's
``user`` tag, which the UI shows as its "Launched by" (it is no sensor's run). A batch whose run key already has
a run is left alone, and the sensors skip a batch the fast lane launched (``launching.plan_document_runs``);
launchers outside the sensors take turns (``batching.one_launcher_at_a_time``). Bulk batches stay the sensor's.

It imports no Dagster (the plan is plain data, the GraphQL plain HTTP): Dagster's import was a large part of a
one-file `submit` (benchmarks/dev_latency.py times submits).

Without a URL, or with the webserver unreachable or slow, nothing is launched here and the sensor launches as
before: the fast lane only ever saves time, and never fails the upload that called it. Where the daemon knows
the URL, the sensors leave a fresh interactive batch to the fast lane for ``GRACE_SECONDS`` (``sensor_grace``):
requesting it too, a sensor could find no run for the key just before the fast lane created one, and launch a
second run with nothing left to claim.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.run_tags import (
    DOCUMENT_BATCHES,
    DOCUMENT_JOB,
    FAST_LANE,
    LAUNCHED_BY_TAG,
    RUN_KEY_TAG,
    USER_TAG,
)
from ingestion_pipeline.core.settings import Settings, data_dir
from ingestion_pipeline.documents.batching import one_launcher_at_a_time
from ingestion_pipeline.documents.run_plan import PlannedRun, plan_batch_runs

log = logging.getLogger("ingestion_pipeline.fast_lane")

LOCATION, REPOSITORY = "ingestion_pipeline", "__repository__"  # workspace.yaml's location; Dagster's default name
# What each sensor plans: uploads (upload_sensor), and an S3 source's objects (s3_sensor, every 10 s) of which
# only the small batches of objects S3 told of by event are interactive, not a listing's.
RUN_TYPES = (("upload",), ("s3_sync",))
LAUNCHED_AS = "ingestion-pipeline fast lane"  # the UI's "Launched by"
TIMEOUT_SECONDS = 5.0  # a webserver slower than this: the sensor's loop is no later
# How long the sensors leave a fresh interactive batch to the fast lane (``launching.plan_document_runs``): its
# launch takes well under a second, or fails within TIMEOUT_SECONDS; then the sensor's next loop launches it.
GRACE_SECONDS = TIMEOUT_SECONDS + 1.0


def sensor_grace(settings: Settings) -> float:
    """What a sensor passes as ``leave_to_fast_lane_seconds``: the grace where a webserver URL is known (the
    fast lane is on), 0 where it is not."""
    return GRACE_SECONDS if webserver_url(settings) else 0.0

_ADD_PARTITION = """
mutation($name: String!, $key: String!, $repo: RepositorySelector!) {
  addDynamicPartition(partitionsDefName: $name, partitionKey: $key, repositorySelector: $repo) {
    __typename
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}"""
_RUNS_WITH_KEY = """
query($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}, limit: 1) {
    __typename
    ... on Runs { results { runId } }
    ... on PythonError { message }
  }
}"""
_LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConflict { message }
    ... on UnauthorizedError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


class WebserverError(Exception):
    """The webserver could not be reached or refused a request (the sensor will launch the run)."""


def _graphql(url: str, query: str, variables: dict[str, Any]) -> dict:
    request = urllib.request.Request(f"{url.rstrip('/')}/graphql", method="POST",
                                     data=json.dumps({"query": query, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - the operator's URL
            body = json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise WebserverError(f"the Dagster webserver at {url} did not answer: {exc}") from exc
    if body.get("errors"):
        raise WebserverError(f"the Dagster webserver at {url} refused: {body['errors'][0].get('message')}")
    return body["data"]


def _tags(mapping: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in mapping.items()]


DEV_MARKER = "dev.json"  # in the data folder: `make dev`'s UI, for a `submit` in another terminal


def record_dev_ui(url: str) -> None:
    """`dev` says where its UI is (its PID stays Dagster's after exec), so that commands run beside it use it."""
    try:
        data_dir().mkdir(parents=True, exist_ok=True)
        (data_dir() / DEV_MARKER).write_text(json.dumps({"pid": os.getpid(), "ui": url}), encoding="utf-8")
    except OSError as exc:  # `submit` beside it then waits for the sensor: slower, not wrong
        log.warning("fast lane: cannot record the UI's address for commands beside `make dev`: %s", exc)


def webserver_url(settings: Settings) -> str | None:
    """``INGESTION_DAGSTER_URL``, else the UI of a `make dev` running on this data folder, else None."""
    if settings.executor.dagster_url:
        return None if settings.executor.dagster_url == "off" else settings.executor.dagster_url
    try:
        marker = json.loads((data_dir() / DEV_MARKER).read_text(encoding="utf-8"))
        cmdline = Path(f"/proc/{int(marker['pid'])}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return marker.get("ui") if b"dagster" in cmdline else None  # a PID since reused is not `make dev`


def launch_interactive(db: Database, settings: Settings, url: str | None = None) -> list[str]:
    """Launch the runs of the interactive batches due now through the webserver; their Dagster run ids.

    Never raises for the webserver's sake: what it could not launch is logged and left to the sensor."""
    url = url or webserver_url(settings)
    if not url:
        return []
    launched: list[str] = []
    repo = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
    try:
        with one_launcher_at_a_time(db):
            for run_types in RUN_TYPES:
                for planned in plan_batch_runs(db, settings.batch, run_types=run_types).runs:
                    if planned.interactive:
                        launched += _launch(url, repo, planned)
    except WebserverError as exc:
        log.warning("fast lane: %s; the upload sensor launches the rest at its next loop", exc)
    return launched


def _launch(url: str, repo: dict[str, str], request: PlannedRun) -> list[str]:
    """The run for one batch, unless its run key already has one (the sensor's, or another launcher's): the run id
    launched, if any."""
    key = request.partition_key
    added = _graphql(url, _ADD_PARTITION, {"name": DOCUMENT_BATCHES, "key": key, "repo": repo})
    kind = added["addDynamicPartition"]["__typename"]
    if kind not in ("AddDynamicPartitionSuccess", "DuplicateDynamicPartitionError"):
        raise WebserverError(f"adding partition {key}: {kind} {added['addDynamicPartition'].get('message')}")
    # the run key as every launcher tags it; and as Dagster tags a sensor's run (a run planned before the key was a
    # tag of its own, during an upgrade)
    for tag in (RUN_KEY_TAG, "dagster/run_key"):
        if _graphql(url, _RUNS_WITH_KEY, {"tags": _tags({tag: request.run_key})})["runsOrError"].get("results"):
            return []  # the sensor (or another launcher) was first
    tags = {**request.tags, "dagster/partition": key, LAUNCHED_BY_TAG: FAST_LANE, USER_TAG: LAUNCHED_AS}
    result = _graphql(url, _LAUNCH, {"params": {
        "selector": {**repo, "jobName": DOCUMENT_JOB}, "runConfigData": {},
        "executionMetadata": {"tags": _tags(tags)}}})["launchRun"]
    if result["__typename"] != "LaunchRunSuccess":
        raise WebserverError(f"launching batch {key}: {result['__typename']} {result.get('message', '')}")
    log.info("fast lane: launched run %s for batch %s", result["run"]["runId"], key)
    return [result["run"]["runId"]]


class FastLane:
    """``launch_interactive`` off the caller's thread, for a server (the HTTP API): one call at a time per
    process; a call while one runs makes it run once more, so a burst of uploads costs a launch or two."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db, self._settings = db, settings
        self._lock = threading.Lock()
        self._running = self._again = False

    def nudge(self) -> None:
        with self._lock:
            if self._running:
                self._again = True
                return
            self._running = True
        threading.Thread(target=self._run, name="fast-lane", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                launch_interactive(self._db, self._settings)
            except Exception:  # the database: the sensor launches it
                log.warning("fast lane: launching failed; the upload sensor launches at its next loop", exc_info=True)
            with self._lock:
                if not self._again:
                    self._running = False
                    return
                self._again = False
