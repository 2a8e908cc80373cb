"""`ingestion-pipeline model prepare`: the deployment's model decision, made once, before any work.

It exports the model (kept under the model cache, so an image built with it embeds at once), judges the
precisions this host could run faster than float32 (``precision.py``: candidates this CPU cannot speed up are
skipped and said so) and records the choice (``model_decision.py``). Run again, it keeps the recorded decision
and only checks that this host computes its vectors: judging happens once per deployment, not per host or
data folder. Changing a recorded decision is explicit (``change=True``): the new one supersedes the old in one
transaction that also queues the re-index of every active version the change makes stale.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.documents import model_decision, reindex
from ingestion_pipeline.documents.devices import gpu_identity, runs_on_cuda
from ingestion_pipeline.documents.embedding import Embedder, model_info, resolve_model_path
from ingestion_pipeline.documents.fingerprint import fingerprint_for, pipeline_fingerprint
from ingestion_pipeline.documents.model_decision import ModelDecision, RecordedDecisions
from ingestion_pipeline.documents.precision import (
    PRECISIONS,
    Choice,
    choose,
    cpu_identity,
    evaluate_cuda,
    judged,
    reference,
)

_log = logging.getLogger("ingestion_pipeline.embedding")


@dataclass(frozen=True)
class Prepared:
    decision: ModelDecision
    outcome: str  # recorded (the first decision) | kept (the recorded one, checked here) | changed
    previous: ModelDecision | None = None
    warning: str | None = None  # why the precision asked for is not the one recorded
    reindex_queued: int = 0
    seconds: float = 0.0

    def as_record(self) -> dict:
        return {**self.decision.as_record(), "outcome": self.outcome, "warning": self.warning,
                "previous_precision": self.previous.candidate.precision if self.previous else None,
                "reindex_queued": self.reindex_queued, "seconds": round(self.seconds, 1)}


def prepare(db: Database, settings: Settings, *, precision: str | None = None, change: bool = False) -> Prepared:
    """Make (or keep and check) the deployment's decision for the configured model.

    ``precision``: what to ask for (default ``INGESTION_EMBEDDING_PRECISION``); asking for another than the
    recorded decision without ``change`` is a ``ValueError`` that says what to run."""
    start = time.perf_counter()
    embedding = settings.embedding
    requested = precision or embedding.precision
    if requested not in PRECISIONS:
        raise ValueError(f"embedding precision must be one of {', '.join(PRECISIONS)}, not {requested!r}")
    model_path = resolve_model_path(embedding.model_path)
    info = model_info(model_path)
    onnx_file = _export(model_path, info.digest, embedding)
    with db.connection() as conn:
        recorded = model_decision.current(conn, info.digest)
    if recorded is not None and not change:
        if precision is not None and precision not in (recorded.requested, recorded.candidate.precision):
            raise ValueError(
                f"the deployment's embedding model runs in {recorded.candidate.precision} on "
                f"{recorded.candidate.runtime} (recorded {recorded.decided_when}); {precision} would change "
                f"every stored vector: run `{model_decision.PREPARE_COMMAND} --precision {precision} --change`, "
                "which records it and queues the re-index")
        kept = _checked_on_this_host(db, model_path, embedding)
        return Prepared(kept, "kept", seconds=time.perf_counter() - start)
    on_gpu = runs_on_cuda(embedding.device)  # INGESTION_EMBEDDING_DEVICE=cuda without CUDA: CudaUnavailable
    if on_gpu:  # the device is part of the decision: float16 judged on this GPU
        evaluations = [] if requested == "f32" else evaluate_cuda(model_path)
        choice = choose(requested, evaluations, embedding.backend, cuda=True)
    else:
        choice, evaluations = _choose(requested, model_path, onnx_file, embedding.backend)
    precision_info = dataclasses.replace(info, precision=choice.candidate.precision)
    chunk = settings.chunk
    decision = ModelDecision(
        info.digest, info.name, choice.candidate, requested, "prepare",
        fingerprint=pipeline_fingerprint(precision_info, chunk.target_tokens, chunk.max_tokens),
        judged_on_cpu=(gpu_identity() if on_gpu else cpu_identity()) if evaluations else None,
        evaluations=model_decision.evaluations_json(evaluations))
    if recorded is not None and _same_vectors(recorded.candidate, decision.candidate):
        kept = _checked_on_this_host(db, model_path, embedding)
        return Prepared(kept, "kept", warning=choice.warning, seconds=time.perf_counter() - start)
    queued = 0
    with db.transaction() as conn:
        model_decision.record(conn, decision)
        if recorded is not None:  # the vectors change: every active version made before is re-indexed
            plan = reindex.find_versions(conn, fingerprint_for(precision_info, chunk.target_tokens, chunk.max_tokens))
            reindex.queue(conn, plan)
            queued = len(plan.queued_file_ids)
    made = _checked_on_this_host(db, model_path, embedding)  # records this host's probe vectors with it
    return Prepared(made, "changed" if recorded is not None else "recorded", previous=recorded,
                    warning=choice.warning, reindex_queued=queued, seconds=time.perf_counter() - start)


def current(db: Database, settings: Settings) -> ModelDecision | None:
    """The recorded decision for the configured model (None: none yet; the first process records float32)."""
    info = model_info(resolve_model_path(settings.embedding.model_path))
    with db.connection() as conn:
        return model_decision.current(conn, info.digest)


def history(db: Database, settings: Settings) -> list[ModelDecision]:
    info = model_info(resolve_model_path(settings.embedding.model_path))
    with db.connection() as conn:
        return model_decision.history(conn, info.digest)


def export(settings: Settings) -> Path | None:
    """The configured model's ONNX export under the model cache, made now if missing (None: torch runs it).
    Needs no database: an image build runs it so that its containers do not export again."""
    embedding = settings.embedding
    model_path = resolve_model_path(embedding.model_path)
    return _export(model_path, model_info(model_path).digest, embedding)


def _export(model_path: str, digest: str, embedding) -> Path | None:
    """The ONNX export (made now if missing; None: torch runs the model)."""
    if embedding.backend == "torch":
        return None
    from ingestion_pipeline.documents.onnx_encoder import UnsupportedModel, exported_model

    try:
        return exported_model(model_path, digest, embedding.cache_dir or _cache_dir())
    except (ImportError, UnsupportedModel) as exc:
        _log.warning("the model is not exported (%s): torch embeds it in float32", exc)
        return None


def _cache_dir():
    from ingestion_pipeline.core.settings import data_dir

    return data_dir() / "models"


def _choose(requested: str, model_path: str, onnx_file, backend: str) -> tuple[Choice, list]:
    if requested == "f16":
        return choose(requested, [], backend), []  # float32, saying float16 runs on CUDA only
    if requested == "f32" or onnx_file is None:
        warning = None if requested in ("f32", "auto") else (
            f"INGESTION_EMBEDDING_PRECISION={requested} is not used, float32 is (the model runs on torch)")
        return Choice(reference(backend), warning), []
    evaluations = judged(model_path, onnx_file, backend)
    return choose(requested, evaluations, backend), evaluations


def _same_vectors(a, b) -> bool:
    """float32 is float32 on any runtime (each host runs its own backend); a reduced precision is its model
    file on its runtime."""
    return a.precision == b.precision == "f32" or a == b


def _checked_on_this_host(db: Database, model_path: str, embedding) -> ModelDecision:
    """Load the model as the recorded decision says: this host's probe vectors are compared with the recorded
    ones (``HostCannotEmbed`` if they differ), or recorded with it when it has none yet."""
    embedder = Embedder(model_path, embedding.batch_size, backend=embedding.backend, cache_dir=embedding.cache_dir,
                        decisions=RecordedDecisions(db.url), device=embedding.device)
    embedder.model  # noqa: B018 - loading is the check
    with db.connection() as conn:
        found = model_decision.current(conn, embedder.file_info.digest)
    assert found is not None
    return found
