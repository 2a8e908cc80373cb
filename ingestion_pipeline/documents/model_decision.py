"""The deployment's one decision about its embedding model: the precision and runtime every host embeds with.

`ingestion-pipeline model prepare` (``model_prepare.py``) exports the model, judges the reduced precisions on
its host (``precision.py``) and records the choice here, in the application database. Every process reads the
record; none judges on its own, so the pipeline fingerprint, the asset code versions and the stored vectors
never depend on which host computed them. A deployment that never ran `prepare` embeds in float32, recorded by
the first process that reads the decision.

The record keeps the deciding host's vectors of the probe texts (``onnx_encoder.PROBE_TEXTS``). Every process
that loads the model encodes them again and compares: a host whose vectors differ (a CPU without bfloat16, an
int8 kernel that rounds otherwise, another backend that cannot run the recorded model) refuses to embed with
``HostCannotEmbed`` instead of writing vectors that no other host would have written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg.rows import dict_row

from ingestion_pipeline.core.failures import CodedError
from ingestion_pipeline.documents.precision import Candidate, Evaluation

if TYPE_CHECKING:
    import numpy as np

# A host agrees with the deciding host when every probe vector it computes has at least this cosine with the
# recorded one: float32 on OpenVINO, ONNX Runtime and torch agree to 0.9999; a reduced precision computed by
# different kernels lands near the quality gate's 0.98
HOST_MIN_COSINE = 0.999
EXIT_CODE = 5  # `ingestion-pipeline` exits with it when this host cannot embed as the deployment decided
PREPARE_COMMAND = "ingestion-pipeline model prepare"


class HostCannotEmbed(CodedError):
    """This host cannot compute the vectors the deployment's recorded decision computes (a step fails with it;
    `process` hands the run's files back uncounted, for a host that can, and the CLI exits with ``EXIT_CODE``)."""

    def __init__(self, decision: ModelDecision, why: str) -> None:
        super().__init__(
            "model_decision_unmet",
            f"this host cannot embed as the deployment decided: the embedding model {decision.model_name} runs in "
            f"{decision.candidate.precision} on {decision.candidate.runtime} (recorded "
            f"{decision.decided_when}), and {why}; nothing was embedded",
            suggestion=f"run this host's embedding on a host like the one that decided, or record another "
                       f"decision for the whole deployment: `{PREPARE_COMMAND} --precision f32 --change` (it "
                       "queues a re-index)")


class RunHostCannotEmbed(CodedError):
    """A run's step failed because the host that executed it cannot embed (``HostCannotEmbed`` or
    ``CudaUnavailable`` there: this process, or a Celery worker elsewhere). Its files went back to the queue
    uncounted; the CLI exits with ``EXIT_CODE``."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(
            "host_cannot_embed", f"run {run_id} stopped: the host of its embedding step cannot embed: {reason}",
            suggestion="its files are back in the queue with no attempt counted; fix that host (its worker's log "
                       "says the same) or take it out of the embedding queue, then run `ingestion-pipeline "
                       "process` again")


@dataclass(frozen=True)
class ModelDecision:
    model_digest: str
    model_name: str
    candidate: Candidate  # the precision, runtime and model file every host embeds with
    requested: str  # what INGESTION_EMBEDDING_PRECISION (or --precision) asked for when it was decided
    decided_by: str  # prepare | default (float32 recorded by the first process, nothing judged)
    fingerprint: str | None = None  # the pipeline fingerprint `prepare` decided with
    judged_on_cpu: str | None = None
    evaluations: list[dict] = field(default_factory=list)
    probe_vectors: np.ndarray | None = None
    decision_id: int | None = None
    decided_at: datetime | None = None

    @property
    def decided_when(self) -> str:
        how = f"by `{PREPARE_COMMAND}`" if self.decided_by == "prepare" else "as the default, nothing judged"
        when = f" {self.decided_at:%Y-%m-%d %H:%M:%S %Z}".rstrip() if self.decided_at else ""
        return f"{how}{when}"

    def as_record(self) -> dict:
        """For people and --json: what was decided, when and by what."""
        return {"model": self.model_name, "model_digest": self.model_digest, "precision": self.candidate.precision,
                "runtime": self.candidate.runtime, "model_file": self.candidate.model_file,
                "requested": self.requested, "decided_by": self.decided_by, "fingerprint": self.fingerprint,
                "judged_on_cpu": self.judged_on_cpu, "decided_at": self.decided_at.isoformat()
                if self.decided_at else None, "host_check": self.probe_vectors is not None,
                "evaluations": self.evaluations}


def evaluations_json(evaluations: list[Evaluation]) -> list[dict]:
    return [{"candidate": e.candidate.label, "passed": e.usable,
             "seconds": e.verdict.seconds if e.verdict else None,
             "float32_seconds": e.verdict.reference_seconds if e.verdict else None,
             "why_not": None if e.usable else e.why_not} for e in evaluations]


_COLUMNS = ("decision_id, model_digest, model_name, precision, runtime, model_file, requested, decided_by, "
            "judged_on_cpu, fingerprint, evaluations, probe_vectors, decided_at")


def current(conn: psycopg.Connection, model_digest: str) -> ModelDecision | None:
    """The deployment's current decision for the model with this digest (None: none recorded)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT {_COLUMNS} FROM model_decisions WHERE model_digest = %s AND superseded_at IS NULL",
                          (model_digest,)).fetchone()
    return _decision(row) if row else None


def history(conn: psycopg.Connection, model_digest: str) -> list[ModelDecision]:
    """Every decision recorded for the model, the newest first (superseded ones included)."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(f"SELECT {_COLUMNS} FROM model_decisions WHERE model_digest = %s "
                           "ORDER BY decision_id DESC", (model_digest,)).fetchall()
    return [_decision(r) for r in rows]


def record(conn: psycopg.Connection, decision: ModelDecision) -> ModelDecision:
    """``decision`` becomes the current one for its model, superseding the one before (``conn`` in a
    transaction: the two statements commit together, so there is always exactly one current decision)."""
    conn.execute("UPDATE model_decisions SET superseded_at = now() WHERE model_digest = %s AND superseded_at IS NULL",
                 (decision.model_digest,))
    _insert(conn, decision, on_conflict="")
    recorded = current(conn, decision.model_digest)
    assert recorded is not None
    return recorded


def record_default(conn: psycopg.Connection, decision: ModelDecision) -> ModelDecision:
    """``decision`` (float32, nothing judged) unless one is recorded already, by this call or another process:
    the one recorded either way."""
    _insert(conn, decision, on_conflict="ON CONFLICT (model_digest) WHERE superseded_at IS NULL DO NOTHING")
    recorded = current(conn, decision.model_digest)
    assert recorded is not None
    return recorded


def record_probes(conn: psycopg.Connection, decision_id: int, probes: np.ndarray) -> None:
    """The probe vectors of the first host that loaded the model under a decision recorded without them."""
    conn.execute("UPDATE model_decisions SET probe_vectors = %s WHERE decision_id = %s AND probe_vectors IS NULL",
                 (_probe_bytes(probes), decision_id))


def check_host(decision: ModelDecision, probes: np.ndarray) -> None:
    """Raise ``HostCannotEmbed`` unless this host's probe vectors are the deciding host's."""
    if decision.probe_vectors is None:
        return
    if decision.probe_vectors.shape != probes.shape:
        raise HostCannotEmbed(decision, f"this host's vectors have shape {probes.shape}, the recorded ones "
                                        f"{decision.probe_vectors.shape}")
    worst = float((decision.probe_vectors * probes).sum(axis=1).min())
    if worst < HOST_MIN_COSINE:
        raise HostCannotEmbed(decision, f"this host's vectors of the probe texts differ from the recorded ones "
                                        f"(min cosine {worst:.4f} < {HOST_MIN_COSINE})")


class RecordedDecisions:
    """The decision as the application database records it: what an ``Embedder`` of a deployed process reads.

    ``url``: the database, or a function giving it, called when first needed (a process that never embeds
    or fingerprints never connects)."""

    def __init__(self, url: str | Callable[[], str]) -> None:
        self._url = url

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self._url if isinstance(self._url, str) else self._url(), autocommit=True)

    def decision(self, model_digest: str, model_name: str, default: Candidate) -> ModelDecision:
        with self._connect() as conn:
            found = current(conn, model_digest)
            if found is None:
                found = record_default(conn, ModelDecision(model_digest, model_name, default, "f32", "default"))
        return found

    def record_probes(self, decision: ModelDecision, probes: np.ndarray) -> None:
        if decision.decision_id is not None:
            with self._connect() as conn:
                record_probes(conn, decision.decision_id, probes)


def _insert(conn: psycopg.Connection, decision: ModelDecision, on_conflict: str) -> None:
    c = decision.candidate
    conn.execute(
        "INSERT INTO model_decisions (model_digest, model_name, precision, runtime, model_file, requested, "
        "decided_by, judged_on_cpu, fingerprint, evaluations, probe_vectors) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) {on_conflict}",
        (decision.model_digest, decision.model_name, c.precision, c.runtime, c.model_file, decision.requested,
         decision.decided_by, decision.judged_on_cpu, decision.fingerprint, json.dumps(decision.evaluations),
         None if decision.probe_vectors is None else _probe_bytes(decision.probe_vectors)))


def _probe_bytes(probes: np.ndarray) -> bytes:
    import numpy as np

    probes = np.ascontiguousarray(probes, dtype=np.float32)
    return json.dumps(list(probes.shape)).encode() + b"\n" + probes.tobytes()


def _probes(data: bytes | None) -> np.ndarray | None:
    if data is None:
        return None
    import numpy as np

    header, _, body = bytes(data).partition(b"\n")
    return np.frombuffer(body, dtype=np.float32).reshape(json.loads(header))


def _decision(row: dict) -> ModelDecision:
    return ModelDecision(
        model_digest=row["model_digest"], model_name=row["model_name"],
        candidate=Candidate(row["precision"], row["runtime"], row["model_file"]), requested=row["requested"],
        decided_by=row["decided_by"], fingerprint=row["fingerprint"], judged_on_cpu=row["judged_on_cpu"],
        evaluations=row["evaluations"] or [], probe_vectors=_probes(row["probe_vectors"]),
        decision_id=row["decision_id"], decided_at=row["decided_at"])
