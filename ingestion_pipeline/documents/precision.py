"""The precisions the embedding model could run in, and how ``ingestion-pipeline model prepare`` picks one.

f32 is the exported model as the pipeline has always run it. The reduced precisions are candidates:
bfloat16 (OpenVINO, only on a CPU that computes in it) and int8 (NNCF's model on OpenVINO, ONNX Runtime's
dynamic quantization; ``quantization.py``). A candidate that cannot be faster on this CPU is skipped unjudged,
with the reason (int8 without VNNI or AMX, bfloat16 without a bfloat16 unit). The others are built and judged
by the quality gate against f32 (``quality_gate.py``); one that fails is never used. ``auto`` takes the fastest
candidate that passes, if it encodes the gate's chunks at least ``MIN_SPEEDUP`` times as fast as f32 (below
that, a timing's noise would decide); ``int8`` or ``bf16`` take the fastest of theirs that passes, else f32
with a warning saying why. The judgement is kept beside the export (``precision-<cpu>-<backend>.json``), and
the choice is the deployment's, recorded in the database (``model_decision.py``): no other process judges.

On a host that embeds on CUDA (``devices.py``) the candidates are float32 and float16 there, sentence-transformers
on torch: float16 is judged by the same gate against float32 on the GPU, and ``auto`` takes it when it passes
and is faster.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ingestion_pipeline.documents.quality_gate import GateTexts, Verdict, judge, load_gate_texts, measure
from ingestion_pipeline.documents.quantization import INT8_ONNX, INT8_OPENVINO

_log = logging.getLogger("ingestion_pipeline.embedding")
PRECISIONS = ("auto", "int8", "bf16", "f16", "f32")
MIN_SPEEDUP = 1.05


@dataclass(frozen=True)
class Candidate:
    precision: str  # f32 | bf16 | int8 | f16
    runtime: str  # openvino | onnx | cuda (sentence-transformers on torch, on the GPU)
    model_file: str  # relative to the export's folder (on CUDA: the model folder itself, "torch")

    @property
    def label(self) -> str:
        return f"{self.precision}/{self.runtime}"


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    verdict: Verdict | None  # None: it could not be built or run (``error`` says why)
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    @property
    def why_not(self) -> str:
        return self.error or "; ".join(self.verdict.failures if self.verdict else ())


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    warning: str | None = None  # why the precision asked for is not the one used


def reference(backend: str) -> Candidate:
    """Float32 on the runtime the backend setting prefers."""
    return Candidate("f32", "onnx" if backend == "onnx" else "openvino", "model.onnx")


CUDA_F32 = Candidate("f32", "cuda", "torch")
CUDA_F16 = Candidate("f16", "cuda", "torch")


def evaluate_cuda(model_path: str, texts: GateTexts | None = None) -> list[Evaluation]:
    """float16 on this host's GPU judged against float32 on it (the quality gate's texts and criteria)."""
    from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS
    from ingestion_pipeline.documents.torch_encoder import TorchEncoder

    texts = texts or load_gate_texts()
    _log.info("judging float16 on CUDA against float32 on %d chunks and %d queries", len(texts.chunks),
              len(texts.queries))
    baseline = measure(TorchEncoder(model_path, device="cuda"), texts, PROBE_TEXTS)
    try:
        verdict = judge(baseline, measure(TorchEncoder(model_path, device="cuda", half=True), texts, PROBE_TEXTS))
    except Exception as exc:  # a model torch cannot run in float16: not used, said why
        return [Evaluation(CUDA_F16, None, f"{type(exc).__name__}: {exc}"[:500])]
    _log.info("%s: %s (%.1f s for the chunks, float32 %.1f s)", CUDA_F16.label,
              "passes" if verdict.passed else "fails: " + "; ".join(verdict.failures), verdict.seconds,
              verdict.reference_seconds)
    return [Evaluation(CUDA_F16, verdict)]


# CPU flags (/proc/cpuinfo) without which a reduced precision cannot beat float32: int8 matrix products
# need VNNI or AMX (plain AVX2/AVX-512 int8 is emulated and slower), bfloat16 a unit that computes in it
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp")
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                return set(value.split())
    except OSError:
        pass
    return set()


def cannot_be_faster(candidate: Candidate, flags: set[str]) -> str | None:
    """Why ``candidate`` cannot encode faster than float32 on a CPU with ``flags`` (None: it may)."""
    if candidate.precision == "int8" and not flags.intersection(INT8_FLAGS):
        return "skipped: this CPU has no VNNI or AMX, so int8 cannot be faster than float32 here"
    if candidate.precision == "bf16" and not flags.intersection(BF16_FLAGS):
        return "skipped: this CPU has no bfloat16 unit"
    return None


def candidates(backend: str, bf16_capable: bool) -> list[Candidate]:
    out = []
    if backend in ("auto", "openvino"):
        if bf16_capable:
            out.append(Candidate("bf16", "openvino", "model.onnx"))
        out.append(Candidate("int8", "openvino", INT8_OPENVINO))
    if backend in ("auto", "onnx"):
        out.append(Candidate("int8", "onnx", INT8_ONNX))
    return out


def choose(requested: str, evaluations: list[Evaluation], backend: str, *, cuda: bool = False) -> Choice:
    """The candidate to embed with, given the judged candidates (f32 needs none); ``cuda``: on the GPU."""
    if requested not in PRECISIONS:
        raise ValueError(f"embedding precision must be one of {', '.join(PRECISIONS)}, not {requested!r}")
    first = CUDA_F32 if cuda else reference(backend)
    if requested == "f32":
        return Choice(first)
    wanted = [e for e in evaluations if requested == "auto" or e.candidate.precision == requested]
    usable = [e for e in wanted if e.usable]
    if not usable:
        if requested == "auto":
            return Choice(first)
        where = "on CUDA (float16 or float32 there)" if cuda else (
            "on a CPU (float16 runs on CUDA only)" if requested == "f16" else "on this CPU")
        reasons = "; ".join(f"{e.candidate.label}: {e.why_not}" for e in wanted) or f"not available {where}"
        return Choice(first, f"INGESTION_EMBEDDING_PRECISION={requested} is not used, float32 is ({reasons})")
    fastest = min(usable, key=lambda e: e.verdict.seconds)
    speedup = fastest.verdict.reference_seconds / fastest.verdict.seconds
    if requested == "auto" and speedup < MIN_SPEEDUP:
        return Choice(first)
    return Choice(fastest.candidate)


def cpu_identity() -> str:
    """The CPU's model name and instruction-set flags (what decides speed and bfloat16), hashed."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        pass
    model = fields.get("model name", platform.processor())
    flags = " ".join(sorted(fields.get("flags", "").split()))
    return hashlib.sha256(f"{platform.machine()}|{model}|{flags}".encode()).hexdigest()[:12]


def judged(model_path: str, onnx_file: Path, backend: str) -> list[Evaluation]:
    """The candidates of ``backend`` on this CPU, judged once and then read from the export's folder."""
    from ingestion_pipeline.documents.onnx_encoder import cache_lock

    record = onnx_file.parent / f"precision-{cpu_identity()}-{backend}.json"
    if record.is_file():
        return _read(record)
    with cache_lock(onnx_file.parent / "quantization") as writable:
        if record.is_file():  # judged by another process while this one waited for the lock
            return _read(record)
        evaluations = evaluate(model_path, onnx_file, backend)
        if writable is not None:
            _write(record, evaluations)
    return evaluations


def evaluate(model_path: str, onnx_file: Path, backend: str, texts: GateTexts | None = None) -> list[Evaluation]:
    """Build every candidate of ``backend`` and judge it against float32 on the gate's texts."""
    from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS, OnnxEncoder, OpenVinoEncoder

    first = reference(backend)
    flags = cpu_flags()
    if flags and all(cannot_be_faster(c, flags) for c in candidates(backend, True)):
        return [Evaluation(c, None, cannot_be_faster(c, flags)) for c in candidates(backend, True)]
    texts = texts or load_gate_texts()
    _log.info("judging the embedding model's reduced precisions against float32 on %d chunks and %d queries "
              "(once per model and CPU)", len(texts.chunks), len(texts.queries))
    reference_encoder = (OnnxEncoder(model_path, onnx_file) if first.runtime == "onnx"
                         else OpenVinoEncoder(model_path, onnx_file, "f32"))
    baseline = measure(reference_encoder, texts, PROBE_TEXTS)
    out = []
    for candidate in candidates(backend, _bf16_capable() if backend != "onnx" else False):
        skipped = cannot_be_faster(candidate, flags) if flags else None  # no flags known: judge it
        if skipped:
            _log.info("%s: %s", candidate.label, skipped)
            out.append(Evaluation(candidate, None, skipped))
            continue
        try:
            encoder = build_encoder(candidate, model_path, onnx_file, texts, reference_encoder)
            verdict = judge(baseline, measure(encoder, texts, PROBE_TEXTS))
        except ImportError as exc:
            out.append(Evaluation(candidate, None, f"not installed: {exc}"))
            continue
        except Exception as exc:  # a quantizer or runtime that cannot handle this model: not used, said why
            out.append(Evaluation(candidate, None, f"{type(exc).__name__}: {exc}"[:500]))
            continue
        _log.info("%s: %s (%.1f s for the chunks, float32 %.1f s)", candidate.label,
                  "passes" if verdict.passed else "fails: " + "; ".join(verdict.failures), verdict.seconds,
                  verdict.reference_seconds)
        out.append(Evaluation(candidate, verdict))
    return out


def build_encoder(candidate: Candidate, model_path: str, onnx_file: Path, texts: GateTexts | None = None,
                  feeder=None):
    """The candidate's encoder, building its model first if it is not there (``feeder`` tokenises NNCF's
    calibration chunks)."""
    from ingestion_pipeline.documents.onnx_encoder import OnnxEncoder, OpenVinoEncoder
    from ingestion_pipeline.documents.quantization import quantize_onnxruntime, quantize_openvino

    folder = onnx_file.parent
    if candidate.model_file == INT8_OPENVINO and not (folder / INT8_OPENVINO).is_file():
        feeder = feeder or OnnxEncoder(model_path, onnx_file)
        calibration = (texts or load_gate_texts()).calibration
        quantize_openvino(onnx_file, [feeder.feed([text]) for text in calibration])
    if candidate.model_file == INT8_ONNX:
        quantize_onnxruntime(onnx_file)
    if candidate.runtime == "onnx":
        return OnnxEncoder(model_path, folder / candidate.model_file)
    encoder = OpenVinoEncoder(model_path, folder / candidate.model_file, "bf16" if candidate.precision == "bf16"
                              else "f32")
    if encoder.precision != ("bf16" if candidate.precision == "bf16" else "f32"):
        raise RuntimeError(f"OpenVINO runs it in {encoder.precision}, not {candidate.precision}")
    return encoder


def _bf16_capable() -> bool:
    try:
        import openvino as ov

        return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:  # noqa: BLE001 - no OpenVINO, or no CPU plugin: no bfloat16 candidate
        return False


def _read(record: Path) -> list[Evaluation]:
    data = json.loads(record.read_text(encoding="utf-8"))
    return [Evaluation(Candidate(**e["candidate"]), Verdict.from_json(e["verdict"]) if e["verdict"] else None,
                       e["error"]) for e in data["evaluations"]]


def _write(record: Path, evaluations: list[Evaluation]) -> None:
    data = {"evaluations": [{"candidate": vars(e.candidate), "verdict": e.verdict.to_json() if e.verdict else None,
                             "error": e.error} for e in evaluations]}
    handle, temporary = tempfile.mkstemp(dir=record.parent, suffix=".json.part")
    with os.fdopen(handle, "w") as stream:
        json.dump(data, stream, indent=1)
    os.replace(temporary, record)
