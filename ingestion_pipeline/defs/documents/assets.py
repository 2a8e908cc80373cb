"""The document assets on `document_batches`: each reads its batch, calls documents/, returns metadata.

raw_documents -> document_elements -> document_chunks -> document_embeddings -> promoted_documents
"""


import dataclasses
import os
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
from ingestion_pipeline.runtime.executor import EMBEDDING_STEP_TAGS, ingestion_executor, job_executor_name
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


@dg.asset(
    partitions_def=document_batches, group_name=GROUP, kinds={"postgres", "s3"}, owners=OWNERS,
    code_version=CODE_VERSIONS.get("raw_documents"), metadata=table_metadata("raw_documents"),
)
def raw_documents(context: dg.AssetExecutionContext, postgres: PostgresResource, upload_store: UploadStoreResource,
                  embedder: dg.ResourceParam[Embedder], settings: SettingsResource, s3: S3Resource,
                  heartbeat: HeartbeatResource) -> dg.MaterializeResult:
    """The batch's files: claimed in the ledger, S3 objects fetched, SHA-256 checked, skipped if current. A person's
    launch also takes files waiting for a retry and dead-lettered ones (failed ones with the tag
    ingestion/replay_failed=true); when the batch has nothing left to do, it says so and the run fails at its last
    step, the batch checks, leaving the catalog as the data is."""
    # only this step asks for the `s3` resource: Dagster builds a boto3 client for every step that requires it
    pipeline = build_document_pipeline(postgres, upload_store, embedder, settings, s3, heartbeat,
                                       progress_log=context.log.info)
    nothing = {}
    try:
        outcomes = retrying_transient_errors(context, lambda: _with_catch_up("raw_documents", pipeline, context),
                                             settings.get().reliability.retry_backoff_seconds)
    except NothingToDo as exc:
        outcomes, nothing = [], _nothing_to_do(context, exc)
    finally:
        pipeline.close()
    _log_failures(context, outcomes)
    return _result(outcomes, **nothing)


OP_RESOURCES = {"postgres", "upload_store", "embedder", "settings", "heartbeat"}  # an op of a spread step's graph


def _in_op(context: dg.OpExecutionContext, asset: str, work: Callable[[DocumentPipeline], T]) -> T:
    """``work`` on the pipeline of an op of ``asset``'s graph: a person's re-execution starting here claims the
    batch first, a transient error asks Dagster for a retry."""
    r = context.resources
    pipeline = build_document_pipeline(r.postgres, r.upload_store, r.embedder, r.settings, heartbeat=r.heartbeat,
                                       progress_log=context.log.info)
    try:
        return retrying_transient_errors(context, lambda: _with_catch_up(asset, pipeline, context,
                                                                         lambda: work(pipeline)),
                                         r.settings.get().reliability.retry_backoff_seconds)
    finally:
        pipeline.close()


def spread_over_workers() -> bool:
    """Whether a run's steps cut their work into items, each a step of its own that any Celery worker takes
    (``INGESTION_EXECUTOR=celery``, which `ingestion-pipeline worker` sets for the steps it executes)."""
    return job_executor_name() == "celery"


@dataclass(frozen=True)
class SpreadStep:
    """A document step as a graph, the same on every host: ``plan`` cuts the batch's work into items (a big PDF's
    units, a big document's chunk parts, the chunks to encode in shares), ``item`` is mapped over them, and
    ``assemble`` puts each file back together once all are done; a re-execution from failure runs only the failed
    items again. In one process the plan step does the whole batch itself (``whole``, on the step's lanes) and
    plans no item: two steps, where a step per item would only queue them one after another."""

    asset: str
    description: str
    upstream: str
    kinds: frozenset[str]
    ops: tuple[tuple[str, str], tuple[str, str], tuple[str, str]]  # (name, description) of plan, item, assemble
    plan: Callable[[DocumentPipeline, str], tuple[list, list[FileOutcome]]]
    item: Callable[[DocumentPipeline, str, Any], list[FileOutcome]]
    assemble: Callable[[DocumentPipeline, str], list[FileOutcome]]
    whole: Callable[[DocumentPipeline, str], list[FileOutcome]]
    items_name: str  # the metadata entry counting the items spread over workers
    totals: tuple[str, ...]
    pool: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    whole_files: str | None = None  # an item that is the batch's other files, not a unit of one


def _outcomes_json(outcomes: list[FileOutcome]) -> list[dict]:
    return [dataclasses.asdict(o) for o in outcomes if o is not None]


UNDONE = ("failed", "dead_letter", "retry", "lost")  # a file's outcome no later word of another op hides


def _latest_outcomes(parts: list[dict]) -> list[FileOutcome]:
    """Each file's latest word among the ops' (the plan's, each item's, the assembly's); a file that failed in one
    share stays failed whatever another share said of it later."""
    by_file: dict[int, FileOutcome] = {}
    for part in parts:
        for o in part.get("outcomes", []):
            prior = by_file.get(o["file_id"])
            if prior is None or prior.status not in UNDONE:
                by_file[o["file_id"]] = FileOutcome(**o)
    return list(by_file.values())


def _merged_extra(parts: list[dict]) -> dict:
    """The ops' model figures as one: the longest model load any of them paid, the rest as the last one says."""
    extra: dict = {}
    for part in parts:
        for name, value in part.get("extra", {}).items():
            extra[name] = max(extra.get(name, value), value) if name == "model_load_seconds" else value
    return extra


def _spread_step(spec: SpreadStep) -> dg.AssetsDefinition:
    """``spec`` as a graph asset (see ``SpreadStep``); what each op found travels to the assembly as JSON
    (``STEP_VALUES``), so the asset's materialisation reports every file as a single step would."""
    (plan_name, plan_about), (item_name, item_about), (assemble_name, assemble_about) = spec.ops
    common = {"required_resource_keys": OP_RESOURCES, "tags": dict(spec.tags)}

    def run(context: dg.OpExecutionContext, work: Callable[[DocumentPipeline], T]) -> T:
        return _in_op(context, spec.asset, work)

    def summary(context: dg.OpExecutionContext, work: Callable[[DocumentPipeline], tuple[list, list[FileOutcome]]]
                ) -> tuple[list, dict]:
        """``work``'s items, and what it found (each file's outcome, the model it used) or that it had nothing to do."""
        embedder = context.resources.embedder
        loaded_before = embedder.loaded
        try:
            items, outcomes = run(context, work)
        except NothingToDo as exc:
            return [], _nothing_to_do(context, exc)
        _log_failures(context, outcomes)
        return items, {"outcomes": _outcomes_json(outcomes), "extra": _model_metadata(embedder, loaded_before)}

    @dg.op(name=plan_name, description=plan_about, ins={"upstream": dg.In(dg.Nothing)}, pool=spec.pool, **common,
           out={"items": dg.DynamicOut(io_manager_key=STEP_VALUES), "found": dg.Out(io_manager_key=STEP_VALUES)})
    def plan(context: dg.OpExecutionContext):
        key = context.partition_key
        if spread_over_workers():
            items, found = summary(context, lambda pipeline: spec.plan(pipeline, key))
            context.log.info(f"{len(items)} item(s) for the workers")
        else:  # in one process: the whole batch here, on the step's lanes; no item, nothing to assemble
            items, found = summary(context, lambda pipeline: ([], spec.whole(pipeline, key)))
            found["batch"] = True
        for i, item in enumerate(items):  # none: the assembly follows at once
            mapping = item if isinstance(item, str) else f"share_{i}"  # a unit's or a part's name; a share's number
            yield dg.DynamicOutput(item, output_name="items", mapping_key=mapping)
        yield dg.Output(found, output_name="found")

    @dg.op(name=item_name, description=item_about, pool=spec.pool, **common, out=dg.Out(io_manager_key=STEP_VALUES))
    def item(context: dg.OpExecutionContext, work) -> dict:
        _, found = summary(context, lambda pipeline: ([], spec.item(pipeline, context.partition_key, work)))
        for o in found.get("outcomes", []):
            if o["status"] not in ("failed", "succeeded"):  # "pages 9-16 read", "already read"
                context.log.info(f"{o['filename']} (file {o['file_id']}): {o['detail']}")
        return {**found, "spread": work != spec.whole_files}

    @dg.op(name=assemble_name, description=assemble_about, ins={"done": dg.In(list), "found": dg.In(dict)},
           **common, out=dg.Out(dg.Nothing))
    def assemble(context: dg.OpExecutionContext, done: list, found: dict):
        key, parts = context.partition_key, [found, *done]
        steps = context.run.step_keys_to_execute
        if found.get("batch"):  # in one process the plan did the batch; a re-execution starting here does it again
            if steps is not None and f"{spec.asset}.{plan_name}" not in steps:  # (a file past the step skips it)
                parts.append(summary(context, lambda pipeline: ([], spec.whole(pipeline, key)))[1])
        elif not any("nothing_to_do" in part for part in parts):
            parts.append(summary(context, lambda pipeline: ([], spec.assemble(pipeline, key)))[1])
        nothing = next(({"nothing_to_do": part["nothing_to_do"]} for part in parts if "nothing_to_do" in part), {})
        every = _latest_outcomes(parts)
        if not every and not nothing and launched_by_a_person(context.run):
            nothing = _found_nothing_before(context)  # the step before had nothing to do: nor has this one
        spread = sum(bool(part.get("spread")) for part in done)
        yield dg.Output(None, metadata=_result(every, **nothing, **_merged_extra(parts), **{spec.items_name: spread},
                                               **{name: _sum(every, name) for name in spec.totals}).metadata)

    @dg.graph_asset(name=spec.asset, description=spec.description, partitions_def=document_batches, group_name=GROUP,
                    kinds=set(spec.kinds), owners=OWNERS, metadata=table_metadata(spec.asset),
                    code_version=CODE_VERSIONS.get(spec.asset),
                    ins={"upstream": dg.AssetIn(key=spec.upstream, dagster_type=dg.Nothing)})
    def step(upstream):
        items, found = plan(upstream)
        return assemble(items.map(item).collect(), found)

    return step


def _one(outcome: FileOutcome | None) -> list[FileOutcome]:
    return [outcome] if outcome is not None else []


document_elements = _spread_step(SpreadStep(
    asset="document_elements", upstream="raw_documents", kinds=frozenset({"postgres"}),
    description="Titles, paragraphs, list items and tables with page numbers and section paths (staging).",
    ops=(("plan_units", "With several workers, each PDF's pages counted and a big one's units planned, one step "
                        "each; in one process, the whole batch extracted here (a big PDF's units on the lanes)."),
         ("extract_unit", "One unit of a big PDF read and kept, or the batch's other files extracted whole."),
         ("assemble_units", "Each big PDF's elements from all of its units (counted), staged as one file's.")),
    plan=lambda pipeline, key: pipeline.plan_extraction(key),
    item=lambda pipeline, key, work: (pipeline.extract_whole_files(key) if work == WHOLE_FILES
                                      else _one(pipeline.extract_unit(key, work))),
    assemble=lambda pipeline, key: pipeline.assemble_units(key),
    whole=lambda pipeline, key: pipeline.extract_batch(key),
    items_name="units_read", totals=("elements",), whole_files=WHOLE_FILES,
))
document_chunks = _spread_step(SpreadStep(
    asset="document_chunks", upstream="document_elements", kinds=frozenset({"postgres"}),
    description="Structure-aware chunks within the embedding model's token budget (staging).",
    ops=(("plan_chunk_parts", "With several workers, each big document's changed sections cut into parts, one step "
                              "each, the other files chunked here; in one process, the whole batch chunked here."),
         ("chunk_part", "One part of a big document's sections chunked and kept."),
         ("assemble_chunks", "Each big document's chunks from all of its parts, numbered and staged as one file's.")),
    plan=lambda pipeline, key: pipeline.plan_chunking(key),
    item=lambda pipeline, key, work: _one(pipeline.chunk_part(key, work)),
    assemble=lambda pipeline, key: pipeline.assemble_chunks(key),
    whole=lambda pipeline, key: pipeline.chunk_batch(key),
    items_name="parts_chunked", totals=("chunks", "tokens"),
))
document_embeddings = _spread_step(SpreadStep(
    asset="document_embeddings", upstream="document_chunks", kinds=frozenset({"pgvector"}),
    description="One vector per chunk; unchanged chunk text under the same model reuses its stored vector.",
    ops=(("plan_shares", "Stored vectors of unchanged chunk text reused; with several workers, the chunks still to "
                         "encode cut into shares (INGESTION_EMBEDDING_SHARE_CHUNKS), one step each on any embedding "
                         "worker; in one process, the whole batch encoded here."),
         ("embed_share", "One share of the batch's chunks encoded and committed unit by unit."),
         ("finish_embeddings", "Every file's vectors complete: marked done with the shares' figures.")),
    plan=lambda pipeline, key: pipeline.plan_embedding(key),
    item=lambda pipeline, key, share: pipeline.embed_share(key, share),
    assemble=lambda pipeline, key: pipeline.finish_embedding(key),
    whole=lambda pipeline, key: pipeline.embed_batch(key),
    items_name="shares", totals=("embedded", "embeddings_reused", "model_ms"),
    pool=EMBEDDING_POOL, tags=EMBEDDING_STEP_TAGS,
))


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
    executor_def=ingestion_executor,
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(
        assets=dg.with_source_code_references(
            [raw_documents, document_elements, document_chunks, document_embeddings, promoted_documents]),
        jobs=[document_batch_job],
    )
