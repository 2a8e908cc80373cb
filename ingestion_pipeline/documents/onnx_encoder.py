"""The embedding model exported to ONNX once per model from torch, run by OpenVINO or ONNX Runtime.

Why: a process that embeds an export imports neither torch nor sentence-transformers (together more than the whole
work of a one-file run here: benchmarks/first_ingest.py times a fresh process's run). OpenVINO runs it in float32
(its reduced precisions, bfloat16 and int8, are used only where they pass the quality gate: ``precision.py``). The
export runs torch once per model digest and is kept under ``<data dir>/models`` with torch's vectors of the probe
texts; an export is only used if its vectors match those (cosine >= 0.9999): ONNX Runtime's once, when it
is made, OpenVINO's in every process that loads it. OpenVINO's
compiled model is cached beside the export (``openvino-cache/``).
Pooling (mean, CLS or max, from ``1_Pooling/config.json``) and L2 normalisation are done here as
sentence-transformers does them; a model with any other pooling is not exported (torch is used).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import warnings
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ingestion_pipeline.documents.late_interaction import token_matrix
from ingestion_pipeline.documents.tokens import load_tokenizer, model_max_seq_length

_log = logging.getLogger(__name__)
MIN_COSINE = 0.9999
PROBES_FILE = "probes.npy"  # torch's vectors of PROBE_TEXTS, next to the export
OPENVINO_CACHE = "openvino-cache"  # OpenVINO's compiled models, next to the export
PROBE_TEXTS = [
    "The committee approved the budget for the new river crossing on Tuesday.",
    "Revenue grew 12% year over year, driven by subscriptions in Europe and Asia.",
    "Die Würde des Menschen ist unantastbar.",
    "x",
    " ".join(["Long text that exceeds the model's sequence length and must be truncated the same way."] * 40),
]


class UnsupportedModel(Exception):
    """The model cannot be run by this encoder (its pooling, or its vectors differ from torch's)."""


def pooling_mode(model_dir: Path) -> str:
    config_path = model_dir / "1_Pooling" / "config.json"
    if not config_path.is_file():
        raise UnsupportedModel("no 1_Pooling/config.json: not a sentence-transformers folder")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if "pooling_mode" in config:  # sentence-transformers 6: "mean", or a list of modes
        named = config["pooling_mode"]
        modes = [named] if isinstance(named, str) else list(named)
    else:  # earlier versions: one flag per mode
        modes = [k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v]
    modes = [{"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}.get(m, m) for m in modes]
    if len(modes) != 1 or modes[0] not in ("mean", "cls", "max"):
        raise UnsupportedModel(f"pooling {modes} is not one of mean, cls, max")
    return modes[0]


class _ExportedEncoder:
    """Tokenise (truncated to the model's sequence length), run the exported transformer, pool, normalise.
    The runtime that runs the transformer is the subclass's."""

    def __init__(self, model_path: str) -> None:
        directory = Path(model_path)
        self._pooling = pooling_mode(directory)
        self._tokenizer = load_tokenizer(model_path)
        self._tokenizer.enable_truncation(model_max_seq_length(directory))
        self._tokenizer.enable_padding(pad_id=self._tokenizer.token_to_id("[PAD]") or 0)

    def _hidden(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden state, (batch, tokens, dimension)."""
        raise NotImplementedError

    def encode(self, texts: list[str], batch_size: int, tokens: list[np.ndarray] | None = None) -> np.ndarray:
        """One L2-normalised vector a text; ``tokens``, when given, is extended with each text's token vectors
        (``late_interaction.token_matrix``), from the same inference."""
        out = []
        for start in range(0, len(texts), batch_size):
            feed = self.feed(texts[start:start + batch_size])
            hidden = self._hidden(feed)
            out.append(self._pool(feed, hidden))
            self._keep_tokens(feed, hidden, tokens)
        return np.vstack(out)

    @staticmethod
    def _keep_tokens(feed: dict[str, np.ndarray], hidden: np.ndarray, tokens: list[np.ndarray] | None) -> None:
        if tokens is not None:
            lengths = feed["attention_mask"].sum(axis=1)
            tokens.extend(token_matrix(hidden[i], int(lengths[i])) for i in range(len(lengths)))

    def feed(self, texts: list[str]) -> dict[str, np.ndarray]:
        encodings = self._tokenizer.encode_batch(texts)
        return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}

    def _pool(self, feed: dict[str, np.ndarray], hidden: np.ndarray) -> np.ndarray:
        """One L2-normalised vector per text of the batch."""
        hidden = hidden.astype(np.float32, copy=False)
        mask = feed["attention_mask"][..., None].astype(np.float32)
        if self._pooling == "mean":
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        elif self._pooling == "cls":
            pooled = hidden[:, 0]
        else:
            pooled = np.where(mask > 0, hidden, -1e9).max(axis=1)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return (pooled / norms).astype(np.float32)


class OnnxEncoder(_ExportedEncoder):
    """The export run by ONNX Runtime (float32). ``threads``: run each call on the calling thread with that
    many threads and no spinning, instead of ONNX Runtime's pool over every core; what a server embedding one
    short query per request wants, so that concurrent calls are scheduled by the OS like the rest of their
    requests, not queued behind each other inside the runtime (``Embedder``'s ``threads``)."""

    def __init__(self, model_path: str, onnx_file: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        super().__init__(model_path)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]

    def _hidden(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return self._session.run(None, {name: feed[name] for name in self._inputs})[0]


class OpenVinoEncoder(_ExportedEncoder):
    """The export run by OpenVINO on the CPU. ``precision`` None is the device's default: bfloat16 on a CPU
    that computes in it (AVX512_BF16 or AMX), float32 elsewhere. ``hint``: OpenVINO's performance hint;
    LATENCY runs one batch at a time over all cores (``benchmarks/embedding_backends.py`` compares them)."""

    def __init__(self, model_path: str, onnx_file: Path, precision: str | None = None,
                 hint: str = "THROUGHPUT") -> None:
        import openvino as ov

        super().__init__(model_path)
        core = ov.Core()
        # OpenVINO's model cache: the compiled model is kept beside the export and imported by the next process (far
        # quicker than reading and compiling it: benchmarks/first_ingest.py times a fresh process's first run).
        # OpenVINO keys each blob by the model, device, configuration and its own version, and compiles again when a
        # blob cannot be imported (a truncated one included); the probe check still runs on what it loaded. OpenVINO
        # writes a blob in place, so processes take turns (a file lock): none reads one half written.
        # THROUGHPUT: one stream per core here, each batch on its own stream, so two batches run at once and the
        # tokenising and pooling of one overlap another's inference (faster than one stream over both cores on a
        # 2-core machine, the same vectors: benchmarks/embedding_backends.py compares them)
        config = {"PERFORMANCE_HINT": hint} | ({"INFERENCE_PRECISION_HINT": precision} if precision else {})
        with cache_lock(onnx_file.parent / OPENVINO_CACHE) as cache:
            if cache is not None:
                core.set_property({"CACHE_DIR": str(cache)})
            self._compiled = core.compile_model(str(onnx_file), "CPU", config)
        self.precision = self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # "bf16", "f32"
        self.from_cache = bool(self._compiled.get_property("LOADED_FROM_CACHE"))
        self._inputs = [port.get_any_name() for port in self._compiled.inputs]
        # batches ``encode`` keeps in flight: what OpenVINO says fills its streams (2 here, 1 under LATENCY)
        self.requests = max(1, int(self._compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))

    def _hidden(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        request = self._compiled.create_infer_request()  # one per call: a request is not thread-safe
        return request.infer({name: feed[name] for name in self._inputs})[0]

    def encode(self, texts: list[str], batch_size: int, tokens: list[np.ndarray] | None = None) -> np.ndarray:
        """Batches in flight on all the compiled model's streams at once: while some infer, the next is
        tokenised and a finished one pooled. Fewer texts than would fill every stream are split so that each
        stream gets some. Requests are this call's own (they are not thread-safe) and take no Python
        callback: OpenVINO's threads never run Python, so none of them can end up collecting garbage that
        holds the compiled model (a thread joining itself at exit aborts the process)."""
        if self.requests == 1 or not texts:
            return super().encode(texts, batch_size, tokens)
        batch_size = max(1, min(batch_size, -(-len(texts) // self.requests)))
        starts = range(0, len(texts), batch_size)
        requests = [self._compiled.create_infer_request() for _ in range(min(self.requests, len(starts)))]
        pending: deque[tuple[object, dict[str, np.ndarray]]] = deque()  # in flight, oldest first
        out: list[np.ndarray] = []
        try:
            for number, start in enumerate(starts):
                feed = self.feed(texts[start:start + batch_size])
                if len(pending) == len(requests):  # every request busy: the oldest finishes first
                    out.append(self._finish(*pending.popleft(), tokens))
                request = requests[number % len(requests)]  # the oldest's, just finished (or never used)
                request.start_async({name: feed[name] for name in self._inputs})
                pending.append((request, feed))
            while pending:
                out.append(self._finish(*pending.popleft(), tokens))
        finally:  # on an error, no request is left running into freed inputs
            for request, _ in pending:
                request.wait()
        return np.vstack(out)

    def _finish(self, request, feed: dict[str, np.ndarray], tokens: list[np.ndarray] | None) -> np.ndarray:
        request.wait()
        hidden = request.get_output_tensor(0).data
        self._keep_tokens(feed, hidden, tokens)
        return self._pool(feed, hidden)


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[Path | None]:
    """``folder`` (created if needed), held with an exclusive lock across processes (released when the
    holder dies); None, and no lock, when it cannot be written: the model is then compiled without a cache."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / ".lock", "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as exc:
        _log.warning("OpenVINO's model cache %s cannot be written (%s): compiling without it", folder, exc)
        yield None
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def openvino_encoder(model_path: str, onnx_file: Path) -> OpenVinoEncoder:
    """OpenVINO in float32 if its vectors match torch's on the probe texts, else ``UnsupportedModel``.
    Checked in every process that loads it (5 short texts): the export's folder may move to another machine.
    (bfloat16, which OpenVINO would pick by itself on a CPU that computes in it, is a precision the quality
    gate judges: ``precision.py``.)"""
    reference = probe_reference(model_path, onnx_file.parent)
    try:
        encoder = OpenVinoEncoder(model_path, onnx_file, "f32")
        worst = _min_cosine(reference, encoder)
    except ImportError:
        raise
    except Exception as exc:  # OpenVINO's own errors (a CPU or graph it cannot compile) are RuntimeErrors
        raise UnsupportedModel(f"OpenVINO failed: {type(exc).__name__}: {exc}"[:2000]) from exc
    if worst >= MIN_COSINE:
        return encoder
    raise UnsupportedModel(f"OpenVINO vectors differ from torch's (min cosine {worst:.6f} < {MIN_COSINE})")


def exported_model(model_path: str, digest: str, cache_dir: Path) -> Path:
    """The model's ONNX file for this digest, exporting (and checking) it first if needed."""
    folder = cache_dir / digest[:32]
    target = folder / "model.onnx"
    refused = folder / "unsupported.txt"
    if target.is_file():
        return target
    if refused.is_file():  # tried before: do not pay torch's import again in every process
        raise UnsupportedModel(refused.read_text(encoding="utf-8"))
    pooling_mode(Path(model_path))
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".onnx.part")
    os.close(handle)
    try:
        try:
            model = _torch_model(model_path)  # loaded once: the probes' reference, then exported
            reference = _torch_probes(model)
            _export(model, Path(temporary))
            worst = _min_cosine_against_torch(reference, model_path, Path(temporary))
        except Exception as exc:  # an architecture torch.onnx cannot trace: torch it is, from now on
            reason = f"the export failed: {type(exc).__name__}: {exc}"[:2000]
            refused.write_text(f"{reason} (delete {refused} to try again)", encoding="utf-8")
            raise UnsupportedModel(reason) from exc
        if worst < MIN_COSINE:
            reason = f"ONNX vectors differ from torch's (min cosine {worst:.6f} < {MIN_COSINE})"
            refused.write_text(reason, encoding="utf-8")
            raise UnsupportedModel(reason)
        _save_probes(folder, reference)  # before the export appears: an export always has its probes
        os.replace(temporary, target)  # atomic: a concurrent process sees the whole file or none
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def _torch_model(model_path: str):
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    return SentenceTransformer(model_path, device="cpu", local_files_only=True)


def _export(model, target: Path) -> None:
    import torch

    transformer = model[0].auto_model.eval()
    tokenizer = model.tokenizer
    sample = tokenizer(["a", "b c"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs):
            return self.transformer(**dict(zip(names, inputs, strict=True))).last_hidden_state

    # record=True: the tracer's notes on control flow are kept here, not shown (torch sets its own warning
    # filters inside the export, so "ignore" alone does not hold); the probes check the result instead
    with torch.no_grad(), warnings.catch_warnings(record=True):
        torch.onnx.export(LastHiddenState(), tuple(sample[n] for n in names), str(target), input_names=names,
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]})


def probe_reference(model_path: str, folder: Path) -> np.ndarray:
    """Torch's vectors of the probe texts, saved with the export (computed once for an export made before
    they were saved)."""
    saved = folder / PROBES_FILE
    if saved.is_file():
        return np.load(saved)
    reference = _torch_probes(_torch_model(model_path))
    try:
        _save_probes(folder, reference)
    except OSError as exc:  # a read-only cache: computed again by the next process, which still works
        _log.warning("could not save the probe vectors in %s: %s", folder, exc)
    return reference


def _torch_probes(model) -> np.ndarray:
    return model.encode(PROBE_TEXTS, normalize_embeddings=True, convert_to_numpy=True)


def _save_probes(folder: Path, reference: np.ndarray) -> None:
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".npy.part")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, reference)
        os.replace(temporary, folder / PROBES_FILE)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _min_cosine(reference: np.ndarray, encoder: _ExportedEncoder) -> float:
    return float((reference * encoder.encode(PROBE_TEXTS, batch_size=len(PROBE_TEXTS))).sum(axis=1).min())


def _min_cosine_against_torch(reference: np.ndarray, model_path: str, onnx_file: Path) -> float:
    return _min_cosine(reference, OnnxEncoder(model_path, onnx_file))
