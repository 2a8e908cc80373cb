"""Step 1, ``raw_documents``: claim the batch's files, fetch S3 objects, verify each stored file, skip what is
current."""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.ledger import DOCUMENT_FILES
from ingestion_pipeline.core.upload_store import StoredFile, StoredObjectMissing
from ingestion_pipeline.documents import file_ledger, languages, reindex, staging
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.promotion import superseded_reason
from ingestion_pipeline.documents.steps.runner import (
    CURRENT,
    SKIPPED,
    STEP_DONE,
    FileOutcome,
    StepRunner,
    ms,
)

# S3 objects downloaded at once by the fetch step (boto3 clients are thread-safe)
_FETCH_CONCURRENCY = 4
# Whether a claim that finds work loads the model while the files are extracted: this process may embed them. A
# Celery worker that takes no embedding step (``ingestion-pipeline worker --queue dagster``) turns it off.
_WARM_UP_THE_MODEL = True


def warm_up_the_model_at_claim(on: bool) -> None:
    """Whether this process's claims load the model ahead of the embedding step (on unless a worker says not)."""
    global _WARM_UP_THE_MODEL
    _WARM_UP_THE_MODEL = on


def claim_batch(run: StepRunner, partition_key: str, *, replay_finished: bool = False,
                replay_failed: bool = False) -> list[FileOutcome]:
    """Claim the batch's files, fetch S3 objects, verify each stored file, skip what is already current.

    ``replay_finished``: a person launched the batch's run, so files waiting for their backoff and
    dead-lettered ones are worked on now (automatic runs leave them to their schedule and to ``retry``),
    permanently failed ones too with ``replay_failed``; and when there is nothing to work on the claim
    raises ``NothingToDo`` with the batch's states, rather than letting the run go green on nothing.
    """
    assert run.worker is not None
    with run.db.transaction() as conn:
        if replay_finished:  # a person's backfill re-indexes the batch's stale versions
            reindex.queue_stale_in_partition(conn, partition_key, run.fingerprint_for)
        claimed = {r["file_id"] for r in file_ledger.claim(conn, run.worker, partition_key,
                                                   replay_finished=replay_finished, replay_failed=replay_failed)}
        if replay_finished and not claimed:
            raise ledger.nothing_to_do(conn, DOCUMENT_FILES, partition_key, noun="file",
                                       retry_hint="ingestion-pipeline retry FILE_ID")
        others = [r for r in file_ledger.partition_rows(conn, partition_key) if r["file_id"] not in claimed]
        done = [r["doc_id"] for r in others if r["status"] == file_ledger.SUCCEEDED]
        active = {v["doc_id"]: v for v in conn.execute(  # one query for the batch, not one per file
            """SELECT doc_id, version_number, pipeline_fingerprint FROM document_versions
                WHERE doc_id = ANY(%s) AND is_active""", (done,)).fetchall()} if done else {}
    with ThreadPoolExecutor(_FETCH_CONCURRENCY, thread_name_prefix="s3-fetch") as pool:
        _prefetch_s3_objects(run, partition_key, pool)
        try:
            outcomes = run.for_each(partition_key, functools.partial(_verify_raw, run), "fetch")
        finally:
            _discard_unused_downloads(run)
    # files go on to be embedded: the model loads while they are extracted, unless this process never embeds
    going_on = any(o.status == STEP_DONE for o in outcomes)
    if going_on and _WARM_UP_THE_MODEL:
        run.embedder.warm_up()
    if going_on:  # the chunk step's language identifier, likewise (slow to load)
        languages.warm_up()
    return [_not_claimed(run, r, active.get(r["doc_id"])) for r in others] + outcomes


def _not_claimed(run: StepRunner, row: dict, active: dict | None) -> FileOutcome:
    """Why a file of the batch is not this run's to work on (``active``: its document's active version)."""
    status = row["status"]
    if status == file_ledger.SUCCEEDED:
        if active is not None and active["pipeline_fingerprint"] == run.fingerprint:
            return FileOutcome.of(row, CURRENT,
                               f"version {active['version_number']} is current")
        detail = "already done" if active is not None else "already done; the document is no longer active"
    elif status == file_ledger.RUNNING:
        detail = f"held by run {row['owner']} (lease until {row['lease_expires_at']:%H:%M:%S})"
    elif status == file_ledger.QUEUED:
        detail = f"waiting: next attempt at {row['next_attempt_at']:%H:%M:%S}"
        with run.db.connection() as conn:
            paused = conn.execute(
                """SELECT t.paused OR coalesce(s.paused, false) AS paused FROM tenants t
                     LEFT JOIN ingestion_sources s ON s.source_id = %s WHERE t.tenant_id = %s""",
                (row["source_id"], row["tenant_id"]),
            ).fetchone()
        if paused and paused["paused"]:
            detail = "paused"
    elif status == file_ledger.CANCELED:
        detail = f"canceled by {row['canceled_by']}"
    else:
        detail = row["error"] or status
    return FileOutcome.of(row, status, detail)


def _verify_raw(run: StepRunner, row: dict) -> FileOutcome:
    start = time.perf_counter()
    if row["run_type"] == reindex.REINDEX and (row["config"] or {}).get("from") != "s3":
        return _stage_stored_elements(run, row, start)
    if row.get("source_id") is not None and not _is_stored(run, row):
        row = _fetch_s3_object(run, row)
    if not row["raw_path"]:
        raise StoredObjectMissing("no stored copy recorded")
    # cheap (the file or object is there); the extract step's one read of the bytes checks their hash
    run.store.verify(row["raw_path"], row["content_hash"])
    with run.db.transaction() as conn:
        file_ledger.hold(conn, row["file_id"], run.owner)
        current = conn.execute(
            """SELECT version_id FROM document_versions
                WHERE tenant_id = %s AND doc_id = %s AND is_active AND content_hash = %s
                  AND pipeline_fingerprint = %s""",
            (row["tenant_id"], row["doc_id"], row["content_hash"], run.fingerprint),
        ).fetchone()
        if current is None:
            staging.ensure_staging_row(conn, row["file_id"], row["tenant_id"])
            file_ledger.heartbeat(conn, row["file_id"], run.owner, {"timings_ms": {"verify": ms(start)}})
            return FileOutcome.of(row, STEP_DONE, "verified")
        file_ledger.mark_succeeded(conn, row["file_id"], run.owner,
                            {"skipped": "already the active version", "version_id": current["version_id"]})
        if row.get("source_id") is not None:  # new ETag, same bytes: the object is current
            conn.execute(
                """UPDATE source_objects SET status = 'active', updated_at = now()
                    WHERE source_id = %s AND key = %s AND last_file_id = %s""",
                (row["source_id"], row["source_key"], row["file_id"]),
            )
        staging.discard(conn, row["file_id"])
    run.release_raw(row)
    return FileOutcome.of(row, SKIPPED, "already the active version")


def _is_stored(run: StepRunner, row: dict) -> bool:
    """The row's bytes are in this process's upload store (an S3 source's object is fetched otherwise)."""
    return bool(row["raw_path"]) and run.store.owns(row["raw_path"]) and run.store.exists(row["raw_path"])


def _stage_stored_elements(run: StepRunner, row: dict, start: float) -> FileOutcome:
    """A re-index starts from the elements stored with the version (the extract step then has
    nothing to do); unless the version is no longer active, or already current."""
    config = row["config"] or {}
    with run.db.transaction() as conn:
        file_ledger.hold(conn, row["file_id"], run.owner)
        version = conn.execute(
            """SELECT version_id, version_number, is_active, pipeline_fingerprint, page_count, extractor_version
                 FROM document_versions WHERE version_id = %s""", (row["reindex_of_version_id"],)).fetchone()
        skipped = outcome = None
        if not version["is_active"]:
            skipped, outcome = superseded_reason(conn, row["doc_id"], version["version_number"]), SKIPPED
        elif (version["pipeline_fingerprint"] == run.fingerprint_for(version["extractor_version"])
              and not config.get("force")):
            skipped, outcome = f"version {version['version_number']} is current", CURRENT
        if skipped is not None:
            file_ledger.mark_succeeded(conn, row["file_id"], run.owner, {"skipped": skipped})
            staging.discard(conn, row["file_id"])
            return FileOutcome.of(row, outcome, skipped)
        staging.ensure_staging_row(conn, row["file_id"], row["tenant_id"])
        n = staging.stage_version_elements(conn, row["file_id"], version["version_id"], version["page_count"])
        if n == 0:
            raise ExtractionError(f"version {version['version_number']} has no stored elements; submit the "
                                  "file again to re-index it", code="reindex_needs_file")
        file_ledger.heartbeat(conn, row["file_id"], run.owner, {"elements": n, "timings_ms": {"verify": ms(start)}})
    return FileOutcome.of(row, STEP_DONE,
                       f"re-indexing version {version['version_number']} from {n} stored elements")


def _prefetch_s3_objects(run: StepRunner, partition_key: str, pool: ThreadPoolExecutor) -> None:
    """Start downloading the batch's S3 objects, a few at a time, while the files before them are
    verified; each file's download (or its error) is taken up by its own turn in ``_verify_raw``."""
    with run.db.connection() as conn:
        rows = file_ledger.held_rows(conn, partition_key, run.owner)
    run.downloads = {
        r["file_id"]: pool.submit(_download_s3_object, run, r) for r in rows
        if r.get("source_id") is not None and not _is_stored(run, r)
        and not (r["run_type"] == reindex.REINDEX and (r["config"] or {}).get("from") != "s3")
    }


def _discard_unused_downloads(run: StepRunner) -> None:
    """Objects downloaded for files that did not get their turn (paused, or the step failed) leave the
    store, unless a waiting ledger row names the same bytes."""
    downloads, run.downloads = run.downloads, {}
    for download in downloads.values():
        try:
            stored = download.result()
        except Exception:  # noqa: BLE001 - the file's turn did not come: its error is nobody's to report
            continue
        with run.db.connection() as conn:
            needed = conn.execute("SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN "
                                  "('queued', 'running') LIMIT 1", (str(stored.path),)).fetchone()
        if stored.created and needed is None:
            run.store.release(stored.path)


def _fetch_s3_object(run: StepRunner, row: dict) -> dict:
    """The listed object version in the raw store (downloaded ahead, or now); its hash and size recorded."""
    download = run.downloads.pop(row["file_id"], None)
    stored = download.result() if download is not None else _download_s3_object(run, row)
    with run.db.transaction() as conn:
        return file_ledger.record_fetched_object(conn, row["file_id"], run.owner, raw_path=str(stored.path),
                                          sha256=stored.sha256, size=stored.size)


def _download_s3_object(run: StepRunner, row: dict) -> StoredFile:
    """Stream the listed object version into the raw store, hashing on the way."""
    if run.s3_client_for is None:
        raise ExtractionError("no S3 connection configured for this run", code="s3_not_configured")
    with run.db.connection() as conn:
        source = conn.execute(
            "SELECT bucket, endpoint_url FROM ingestion_sources WHERE source_id = %s", (row["source_id"],)
        ).fetchone()
    client = run.s3_client_for(source["endpoint_url"])
    location = f"s3://{source['bucket']}/{row['source_key']}"
    try:
        response = client.get_object(Bucket=source["bucket"], Key=row["source_key"], IfMatch=row["source_etag"])
    except Exception as exc:  # botocore ClientError carries the S3 error code
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404"):
            raise ExtractionError(f"{location} no longer exists (deleted after it was listed)",
                                  code="s3_object_deleted") from exc
        if code in ("PreconditionFailed", "412"):
            raise ExtractionError(
                f"{location} changed after it was listed (ETag {row['source_etag']}); the next sync queues it",
                code="s3_precondition_failed", suggestion="nothing to do: the next sync queues the new version",
            ) from exc
        raise  # classified: throttling, 5xx and timeouts are retried with backoff
    body = response["Body"]
    try:
        return run.store.put(row["tenant_id"], body, max_bytes=run.settings.upload.max_bytes)
    finally:
        body.close()
