"""The document assets on `document_batches`: each reads its batch, calls documents/, returns metadata.

raw_documents -> document_elements -> document_chunks -> document_embeddings -> promoted_documents
"""


import os
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TypeVar

import dagster as dg

from ingestion_pipeline.core.ledger import NothingToDo
from ingestion_pipeline.defs.catalog import OWNERS, table_metadata
from ingestion_pipeline.defs.documents.batch_checks import checks_follow
from ingestion_pipeline.defs.documents.fingerprints import code_versions
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import (
    HeartbeatResource,
    PostgresResource,
    SettingsResource,
    UploadStoreResource,
    build_document_pipeline,
)
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.defs.step_values import STEP_VALUES
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.pipeline import DocumentPipeline, FileOutcome, batch_report
from ingestion_pipeline.documents.steps.extract import WHOLE_FILES
from ingestion_pipeline.runtime.executor import embedding_step_tags, job_executor, job_executor_name
from ingestion_pipeline.runtime.steps import (
    failure_for,
    first_step_run,
    launched_by_a_person,
    replays_failed,
    retrying_transient_errors,
)

GROUP = "documents"
T = TypeVar("T")
# The model's CPU or accelerator is what embedding steps share: its limit is the instance's (dagster.yaml's
# `concurrency: pools`, or the UI's concurrency page)
EMBEDDING_POOL = "embedding"
CODE_VERSIONS = code_versions()  # static: the code's versions (fingerprints.py)


def _files_table(outcomes: list[FileOutcome]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord({"file_id": o.file_id, "file": o.filename, "outcome": o.status, "detail": o.detail[:500]})
            for o in outcomes
        ],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("file_id", "int"),
                dg.TableColumn("file", "string"),
                dg.TableColumn("outcome", "string"),
                dg.TableColumn("detail", "string"),
            ]
        ),
    )


def _file_metadata(outcomes: list[FileOutcome]) -> tuple[dict, Counter]:
    """Every file's row and how many there are; and the count of each outcome."""
    return {"files": _files_table(outcomes), "file_count": len(outcomes)}, Counter(o.status for o in outcomes)


def _result(outcomes: list[FileOutcome], **extra) -> dg.MaterializeResult:
    files, counts = _file_metadata(outcomes)
    return dg.MaterializeResult(metadata={
        **files, "failed": counts.get("failed", 0),
        **{f"outcome_{k}": v for k, v in counts.items() if k != "failed"}, **extra,
    })


def _nothing_to_do(context: dg.AssetExecutionContext, exc: NothingToDo) -> dict:
    """A person's run that finds nothing to do in its batch (every file done, failed for a reason another attempt
    does not change, or held by another run): the step says so, in the run's log and its metadata, and
    materialises with no file worked on, so the catalog stays as the data is. The run fails at its last step
    (the batch checks), after they have looked at the batch: failing here would leave every asset
    after this step unmaterialised, which the UI paints as a failed partition and checks "execution failed" over
    intact data."""
    context.log.warning(str(exc))
    return {"nothing_to_do": str(exc)}


def _found_nothing_before(context: dg.AssetExecutionContext) -> dict:
    """What an earlier step of this run found when it had nothing to do (its materialisation's metadata, read
    through the instance's public records), or nothing."""
    for step in UPSTREAM_OF_PROMOTION:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(step), asset_partitions=[context.partition_key]), limit=1)
        for record in records.records:
            metadata = record.asset_materialization.metadata if record.asset_materialization else {}
            if record.run_id == context.run.run_id and "nothing_to_do" in metadata:
                return {"nothing_to_do": metadata["nothing_to_do"].value}
    return {}


def _log_failures(context: dg.AssetExecutionContext, outcomes: list[FileOutcome]) -> None:
    for o in outcomes:
        if o.status == "failed":
            context.log.warning(f"{o.filename} (file {o.file_id}) failed: {o.detail}")


def _model_metadata(embedder: Embedder, loaded_before: bool) -> dict:
    """What a step paid for the model (0 when its process had it already), which process holds it, and what it
    embeds with by the deployment's recorded decision (``Embedder.decision_shown``); nothing when the step did not
    use it."""
    if not embedder.loaded:
        return {}
    return {"model_load_seconds": 0.0 if loaded_before else round(embedder.load_seconds or 0.0, 3),
            "model_process": f"{socket.gethostname()}:{os.getpid()}", **embedder.decision_shown()}


def _sum(outcomes: list[FileOutcome], key: str) -> int:
    return sum(o.stats.get(key, 0) for o in outcomes)


StepWork = Callable[[DocumentPipeline, dg.AssetExecutionContext], list[FileOutcome]]

# Each step's work, in the batch's order.
STEPS: dict[str, StepWork] = {
    "raw_documents": lambda pipeline, context: pipeline.claim_batch(
        context.partition_key, replay_finished=launched_by_a_person(context.run),
        replay_failed=replays_failed(context.run)),
    "document_elements": lambda pipeline, context: pipeline.extract_batch(context.partition_key),
    "document_chunks": lambda pipeline, context: pipeline.chunk_batch(context.partition_key),
    "document_embeddings": lambda pipeline, context: pipeline.embed_batch(context.partition_key),
    "promoted_documents": lambda pipeline, context: pipeline.promote_batch(context.partition_key),
}
UPSTREAM_OF_PROMOTION = [name for name in STEPS if name != "promoted_documents"]


# Steps with work of their own once the batch's files are through them, and whether some is left: a promotion
# step that failed in its sweep of the vector backlog (documents/vector_backlog.py) has promoted every file, and
# its re-execution from failure takes the backlog instead of failing with nothing to do.
FINISHES_AFTER_ITS_FILES: dict[str, Callable[[DocumentPipeline], bool]] = {
    "promoted_documents": DocumentPipeline.promotion_left_work,
}


def _with_catch_up(name: str, pipeline: DocumentPipeline, context: dg.AssetExecutionContext,
                   work: Callable[[], T] | None = None) -> list[FileOutcome] | T:
    """``name``'s work; first, in a person's run that starts at ``name`` (a re-execution from failure) and no
    longer holds the batch's files (the run-failure sensor handed them back), the claim and the steps before
    it: the run re-drives the batch's remaining work as its owner (a file past a step skips it) or fails with
    ``NothingToDo``, instead of running green on files it no longer holds; except a step of
    ``FINISHES_AFTER_ITS_FILES`` whose batch is all done and which has work of its own left: it does that."""
    if (name != "raw_documents" and launched_by_a_person(context.run)
            and first_step_run(context.run, STEPS) == name and not pipeline.holds_files(context.partition_key)):
        context.log.info(f"a person's run starting at {name}: claiming the batch's remaining work first")
        try:
            for earlier, step in STEPS.items():
                if earlier == name:
                    break
                _log_failures(context, step(pipeline, context))
        except NothingToDo as exc:
            left = FINISHES_AFTER_ITS_FILES.get(name)
            if not (exc.everything_done and left is not None and left(pipeline)):
                raise
            context.log.info(f"every file of the batch is done; {name} finishes the work it does after them")
    return work() if work is not None else STEPS[name](pipeline, context)


def _file_step(name: str, description: str, *, deps: list, kinds: set[str],
               totals: tuple[str, ...] = (), fetches_from_s3: bool = False, pool: str | None = None,
               op_tags: dict[str, str] | None = None) -> dg.AssetsDefinition:
    """A step that works the batch file by file: it does ``STEPS[name]`` and reports every file's outcome.

    Only the step that fetches objects asks for the ``s3`` resource: Dagster builds a boto3 client for every
    step that requires it (five steps per run; docs/benchmarks.md, "What loading the code location costs")."""

    def run_step(context: dg.AssetExecutionContext, postgres: PostgresResource, upload_store: UploadStoreResource,
                 embedder: Embedder, settings: SettingsResource, s3: S3Resource | None,
                 heartbeat: HeartbeatResource) -> dg.MaterializeResult:
        pipeline = build_document_pipeline(postgres, upload_store, embedder, settings, s3, heartbeat,
                                           progress_log=context.log.info)
        loaded_before, nothing = embedder.loaded, {}
        try:
            outcomes = retrying_transient_errors(context, lambda: _with_catch_up(name, pipeline, context),
                                                 settings.get().reliability.retry_backoff_seconds)
        except NothingToDo as exc:
            outcomes, nothing = [], _nothing_to_do(context, exc)
        finally:
            pipeline.close()
        if not outcomes and not nothing and launched_by_a_person(context.run):
            nothing = _found_nothing_before(context)  # the step before had nothing to do: nor has this one
        _log_failures(context, outcomes)
        return _result(outcomes, **nothing, **_model_metadata(embedder, loaded_before),
                       **{key: _sum(outcomes, key) for key in totals})

    asset = dg.asset(name=name, description=description, partitions_def=document_batches, group_name=GROUP,
                     deps=deps, kinds=kinds, code_version=CODE_VERSIONS.get(name), owners=OWNERS,
                     metadata=table_metadata(name), pool=pool, op_tags=op_tags)
    if fetches_from_s3:
        @asset
        def fetch_step(context: dg.AssetExecutionContext, postgres: PostgresResource, upload_store: UploadStoreResource,
                       embedder: dg.ResourceParam[Embedder], settings: SettingsResource,
                       s3: S3Resource, heartbeat: HeartbeatResource) -> dg.MaterializeResult:
            return run_step(context, postgres, upload_store, embedder, settings, s3, heartbeat)

        return fetch_step

    @asset
    def step(context: dg.AssetExecutionContext, postgres: PostgresResource, upload_store: UploadStoreResource,
             embedder: dg.ResourceParam[Embedder], settings: SettingsResource,
             heartbeat: HeartbeatResource) -> dg.MaterializeResult:
        return run_step(context, postgres, upload_store, embedder, settings, None, heartbeat)

    return step


raw_documents = _file_step(
    "raw_documents",
    "The batch's files: claimed in the ledger, S3 objects fetched, SHA-256 checked, skipped if current. A "
    "person's launch also takes files waiting for a retry and dead-lettered ones (failed ones with the tag "
    "ingestion/replay_failed=true); when the batch has nothing left to do, it says so and the run fails at "
    "its last step, the batch checks, leaving the catalog as the data is.",
    deps=[], kinds={"postgres", "s3"}, fetches_from_s3=True,
)
OP_RESOURCES = {"postgres", "upload_store", "embedder", "settings", "heartbeat"}  # an op of a fanned-out graph's


def _in_op(context: dg.OpExecutionContext, asset: str, work: Callable[[DocumentPipeline], T]) -> T:
    """``work`` on the pipeline of an op of ``asset``'s graph, as a step of the asset would do it: a person's
    re-execution starting here claims the batch first, a transient error asks Dagster for a retry."""
    r = context.resources
    pipeline = build_document_pipeline(r.postgres, r.upload_store, r.embedder, r.settings, heartbeat=r.heartbeat,
                                       progress_log=context.log.info)
    try:
        return retrying_transient_errors(context, lambda: _with_catch_up(asset, pipeline, context,
                                                                         lambda: work(pipeline)),
                                         r.settings.get().reliability.retry_backoff_seconds)
    except NothingToDo as exc:
        raise failure_for(exc) from exc
    finally:
        pipeline.close()


ELEMENTS_DESCRIPTION = "Titles, paragraphs, list items and tables with page numbers and section paths (staging)."


def _fanned_out_elements() -> dg.AssetsDefinition:
    """``document_elements`` as a graph for several workers (``INGESTION_EXECUTOR=celery``): a big PDF's units
    (``documents/units.py``) fan out, one mapped step per unit on any worker, and are assembled once all are
    done. A re-execution from failure runs only the failed units again (and the assembly)."""
    resources = OP_RESOURCES

    def run(context: dg.OpExecutionContext, work: Callable[[DocumentPipeline], T]) -> T:
        return _in_op(context, "document_elements", work)

    @dg.op(name="plan_units", ins={"claimed": dg.In(dg.Nothing)}, required_resource_keys=resources,
           out=dg.DynamicOut(str, io_manager_key=STEP_VALUES),
           description="Count each PDF's pages; a big one's units are planned, one step each.")
    def plan_units(context: dg.OpExecutionContext):
        keys, outcomes = run(context, lambda pipeline: pipeline.plan_extraction(context.partition_key))
        _log_failures(context, outcomes)
        context.log.info(f"{len(keys) - (WHOLE_FILES in keys)} unit(s) to read on the workers")
        for key in keys:
            yield dg.DynamicOutput(key, mapping_key=key)

    @dg.op(name="extract_unit", required_resource_keys=resources, out=dg.Out(str, io_manager_key=STEP_VALUES),
           description="One unit of a big PDF read and kept (or, for the unit `whole_files`, the batch's other "
                       "files extracted whole).")
    def extract_unit(context: dg.OpExecutionContext, work: str) -> str:
        if work == WHOLE_FILES:
            _log_failures(context, run(context, lambda pipeline: pipeline.extract_whole_files(context.partition_key)))
        else:
            outcome = run(context, lambda pipeline: pipeline.extract_unit(context.partition_key, work))
            if outcome is not None and outcome.status != "failed":  # "pages 9-16 read", or "already read"
                context.log.info(f"{outcome.filename} (file {outcome.file_id}): {outcome.detail}")
            _log_failures(context, [outcome] if outcome is not None else [])
        return work

    @dg.op(name="assemble_units", required_resource_keys=resources, out=dg.Out(dg.Nothing),
           description="Each big PDF's elements from all of its units (counted), staged as one file's.")
    def assemble_units(context: dg.OpExecutionContext, done: list[str]):
        outcomes = run(context, lambda pipeline: pipeline.assemble_units(context.partition_key))
        _log_failures(context, outcomes)
        files, counts = _file_metadata(outcomes)
        yield dg.Output(None, metadata={**files, "failed": counts.get("failed", 0),
                                        "units_read": len(done) - (WHOLE_FILES in done),
                                        "elements": _sum(outcomes, "elements")})

    @dg.graph_asset(name="document_elements", description=ELEMENTS_DESCRIPTION, partitions_def=document_batches,
                    group_name=GROUP, kinds={"postgres"}, owners=OWNERS, metadata=table_metadata("document_elements"),
                    ins={"raw_documents": dg.AssetIn(dagster_type=dg.Nothing)})
    def document_elements(raw_documents):
        return assemble_units(plan_units(raw_documents).map(extract_unit).collect())

    return document_elements


def _elements_asset(fanned_out: bool) -> dg.AssetsDefinition:
    if fanned_out:
        return _fanned_out_elements()
    return _file_step("document_elements", ELEMENTS_DESCRIPTION, deps=[raw_documents], kinds={"postgres"},
                      totals=("elements",))


# Several workers (Celery) read a big PDF's units as steps of their own; in one process, on the step's lanes
document_elements = _elements_asset(job_executor_name() == "celery")
CHUNKS_DESCRIPTION = "Structure-aware chunks within the embedding model's token budget (staging)."


def _fanned_out_chunks() -> dg.AssetsDefinition:
    """``document_chunks`` as a graph for several workers: a big document's changed sections are chunked in parts
    (``documents/steps/chunk_parts.py``), one mapped step per part on any worker, and assembled once all are
    done; the batch's other files are chunked whole in one step. A re-execution from failure runs only the
    failed parts again (and the assembly)."""
    resources = OP_RESOURCES

    def run(context: dg.OpExecutionContext, work: Callable[[DocumentPipeline], T]) -> T:
        return _in_op(context, "document_chunks", work)

    @dg.op(name="plan_chunk_parts", ins={"extracted": dg.In(dg.Nothing)}, required_resource_keys=resources,
           out=dg.DynamicOut(str, io_manager_key=STEP_VALUES),
           description="Each big document's changed sections cut into parts, one step each; the other files "
                       "chunked here.")
    def plan_chunk_parts(context: dg.OpExecutionContext):
        keys, outcomes = run(context, lambda pipeline: pipeline.plan_chunking(context.partition_key))
        _log_failures(context, outcomes)
        context.log.info(f"{len(keys)} part(s) to chunk on the workers")
        for key in keys:  # none: the assembly follows at once
            yield dg.DynamicOutput(key, mapping_key=key)

    @dg.op(name="chunk_part", required_resource_keys=resources, out=dg.Out(str, io_manager_key=STEP_VALUES),
           description="One part of a big document's sections chunked and kept.")
    def chunk_part(context: dg.OpExecutionContext, work: str) -> str:
        outcome = run(context, lambda pipeline: pipeline.chunk_part(context.partition_key, work))
        if outcome is not None and outcome.status != "failed":
            context.log.info(f"{outcome.filename} (file {outcome.file_id}): {outcome.detail}")
        _log_failures(context, [outcome] if outcome is not None else [])
        return work

    @dg.op(name="assemble_chunks", required_resource_keys=resources, out=dg.Out(dg.Nothing),
           description="Each big document's chunks from all of its parts, numbered and staged as one file's.")
    def assemble_chunks(context: dg.OpExecutionContext, done: list[str]):
        outcomes = run(context, lambda pipeline: pipeline.assemble_chunks(context.partition_key))
        _log_failures(context, outcomes)
        files, counts = _file_metadata(outcomes)
        yield dg.Output(None, metadata={**files, "failed": counts.get("failed", 0), "parts_chunked": len(done),
                                        **{key: _sum(outcomes, key) for key in ("chunks", "tokens")}})

    @dg.graph_asset(name="document_chunks", description=CHUNKS_DESCRIPTION, partitions_def=document_batches,
                    group_name=GROUP, kinds={"postgres"}, owners=OWNERS, metadata=table_metadata("document_chunks"),
                    ins={"document_elements": dg.AssetIn(dagster_type=dg.Nothing)})
    def document_chunks(document_elements):
        return assemble_chunks(plan_chunk_parts(document_elements).map(chunk_part).collect())

    return document_chunks


def _chunks_asset(fanned_out: bool) -> dg.AssetsDefinition:
    if fanned_out:
        return _fanned_out_chunks()
    return _file_step("document_chunks", CHUNKS_DESCRIPTION, deps=[document_elements], kinds={"postgres"},
                      totals=("chunks", "tokens"))


document_chunks = _chunks_asset(job_executor_name() == "celery")
EMBEDDINGS_DESCRIPTION = "One vector per chunk; unchanged chunk text under the same model reuses its stored vector."


def _fanned_out_embeddings() -> dg.AssetsDefinition:
    """``document_embeddings`` as a graph for several workers: the chunks still to encode (a big document's
    thousands) are cut into shares (``INGESTION_EMBEDDING_SHARE_CHUNKS``), one mapped step each on any embedding
    worker, then the files are finished with the figures the shares recorded."""
    resources = OP_RESOURCES
    tags = embedding_step_tags()

    def run(context: dg.OpExecutionContext, work: Callable[[DocumentPipeline], T]) -> T:
        return _in_op(context, "document_embeddings", work)

    @dg.op(name="plan_shares", ins={"chunked": dg.In(dg.Nothing)}, required_resource_keys=resources, tags=tags,
           out=dg.DynamicOut(list, io_manager_key=STEP_VALUES),
           description="Stored vectors of unchanged chunk text reused; the chunks still to encode cut into shares.")
    def plan_shares(context: dg.OpExecutionContext):
        shares, outcomes = run(context, lambda pipeline: pipeline.plan_embedding(context.partition_key))
        _log_failures(context, outcomes)
        context.log.info(f"{sum(h - lo + 1 for share in shares for _, lo, h in share)} chunk(s) to encode in "
                         f"{len(shares)} share(s)")
        for i, share in enumerate(shares):  # none (every vector reused): Dagster finishes after no share too
            yield dg.DynamicOutput(share, mapping_key=f"share_{i}")

    @dg.op(name="embed_share", required_resource_keys=resources, tags=tags, pool=EMBEDDING_POOL,
           out=dg.Out(int, io_manager_key=STEP_VALUES),
           description="One share of the batch's chunks encoded and committed unit by unit.")
    def embed_share(context: dg.OpExecutionContext, share: list) -> int:
        outcomes = run(context, lambda pipeline: pipeline.embed_share(context.partition_key, share))
        _log_failures(context, outcomes)
        return _sum(outcomes, "embedded")

    @dg.op(name="finish_embeddings", required_resource_keys=resources, tags=tags, out=dg.Out(dg.Nothing),
           description="Every file's vectors complete: marked done with the shares' figures.")
    def finish_embeddings(context: dg.OpExecutionContext, encoded: list[int]):
        embedder = context.resources.embedder
        loaded_before = embedder.loaded
        outcomes = run(context, lambda pipeline: pipeline.finish_embedding(context.partition_key))
        _log_failures(context, outcomes)
        files, counts = _file_metadata(outcomes)
        yield dg.Output(None, metadata={
            **files, "failed": counts.get("failed", 0), "shares": len(encoded),
            **_model_metadata(embedder, loaded_before),
            **{key: _sum(outcomes, key) for key in ("embedded", "embeddings_reused", "model_ms")}})

    @dg.graph_asset(name="document_embeddings", description=EMBEDDINGS_DESCRIPTION, partitions_def=document_batches,
                    group_name=GROUP, kinds={"pgvector"}, owners=OWNERS,
                    metadata=table_metadata("document_embeddings"),
                    ins={"document_chunks": dg.AssetIn(dagster_type=dg.Nothing)})
    def document_embeddings(document_chunks):
        return finish_embeddings(plan_shares(document_chunks).map(embed_share).collect())

    return document_embeddings


def _embeddings_asset(fanned_out: bool) -> dg.AssetsDefinition:
    if fanned_out:
        return _fanned_out_embeddings()
    return _file_step("document_embeddings", EMBEDDINGS_DESCRIPTION, deps=[document_chunks], kinds={"pgvector"},
                      totals=("embedded", "embeddings_reused", "model_ms"), pool=EMBEDDING_POOL,
                      op_tags=embedding_step_tags())


# Several workers (Celery) encode a big batch's shares at once; in one process, one step
document_embeddings = _embeddings_asset(job_executor_name() == "celery")


@dg.asset(
    partitions_def=document_batches,
    group_name=GROUP,
    deps=[document_embeddings],
    kinds={"postgres", "pgvector"},
    code_version=CODE_VERSIONS["promoted_documents"],
    owners=OWNERS,
    metadata=table_metadata("promoted_documents"),
)
def promoted_documents(
    context: dg.AssetExecutionContext,
    postgres: PostgresResource,
    upload_store: UploadStoreResource,
    embedder: dg.ResourceParam[Embedder],
    settings: SettingsResource,
    heartbeat: HeartbeatResource,
) -> Iterator[dg.MaterializeResult]:
    """Each file's chunks, vectors and tsvectors promoted atomically as its document's one active version.

    A person's run that found nothing to do (``_nothing_to_do``) says so in this materialisation and fails at its
    last step, the batch checks (``batch_checks.py``), after they have looked at the batch as it is: the run is
    red, never green on nothing, while the catalog keeps every asset's partition materialised and the checks'
    real results. Launched without those checks, it fails here, after materialising."""
    pipeline = build_document_pipeline(postgres, upload_store, embedder, settings, heartbeat=heartbeat,
                                       progress_log=context.log.info)
    nothing = {}
    try:
        promoted = retrying_transient_errors(context, lambda: _with_catch_up("promoted_documents", pipeline, context),
                                             settings.get().reliability.retry_backoff_seconds)
    except NothingToDo as exc:
        promoted, nothing = [], _nothing_to_do(context, exc)
    if not promoted and not nothing and launched_by_a_person(context.run):
        nothing = _found_nothing_before(context)
    _log_failures(context, promoted)
    with postgres.db.connection() as conn:
        every_file = batch_report(conn, context.partition_key)
    files, counts = _file_metadata(every_file)
    yield dg.MaterializeResult(metadata={
        **nothing,
        **files,
        "succeeded": counts.get("succeeded", 0),
        "failed": counts.get("failed", 0),
        "dead_letter": counts.get("dead_letter", 0),
        "waiting_for_retry": counts.get("queued", 0),
        "promoted_now": sum(1 for o in promoted if o.status == "succeeded"),
        "chunks_promoted": sum(o.stats.get("chunks", 0) for o in promoted),
    })
    if nothing and not checks_follow(context.run):
        raise failure_for(NothingToDo(nothing["nothing_to_do"]))


document_batch_job = dg.define_asset_job(
    "document_batch_job",
    selection=dg.AssetSelection.assets(
        raw_documents, document_elements, document_chunks, document_embeddings, promoted_documents
    ),
    description="Ingest one batch of documents: extract, chunk, embed, promote.",
    # in-process by default: the model loads once and one heartbeat keeps the run's claims; Celery workers with
    # INGESTION_EXECUTOR=celery (runtime/executor.py)
    executor_def=job_executor(),
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(
        assets=dg.with_source_code_references(
            [raw_documents, document_elements, document_chunks, document_embeddings, promoted_documents]),
        jobs=[document_batch_job],
    )
