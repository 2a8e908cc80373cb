"""Encode speed and quality of the embedding model on this machine: torch, ONNX Runtime, OpenVINO, and
the reduced precisions (bfloat16, int8) the pipeline's quality gate judges.

The texts are our own chunks of the 300 small files compare_peers.py builds (extracted and chunked as
the pipeline does), encoded sorted by length as the embed step does. Each setting is timed in
interleaved rounds (median printed). ONNX Runtime and OpenVINO run the pipeline's own export of the model
(``documents/onnx_encoder.py``) and its int8 models (``documents/quantization.py``: NNCF's on OpenVINO,
ONNX Runtime's dynamic one; onnx-int8-tensor is the dynamic one with one scale per weight tensor, shown
for comparison). ov-f32 is OpenVINO as the pipeline runs it (THROUGHPUT hint, a batch per stream);
ov-f32-latency runs one batch at a time over all cores; ov-bf16 only where the CPU computes in bfloat16.
Each setting's vectors are compared with torch's (cosine), and retrieval with them is measured as
known-item recall@5 and @10 (12-word passages from a quarter, a third and half of the way into every
chunk, searched against all chunks) and as the overlap of each hand-written query's top 10 with
ov-f32's; ``gate`` is the pipeline's quality gate (``documents/quality_gate.py``) applied to these
figures against ov-f32.

    .venv/bin/python benchmarks/embedding_backends.py [--rounds 3] [--files 300] [--only ov-f32 ...]
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def our_chunks(files: list[Path]) -> list[str]:
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.documents.chunking import chunk_elements, effective_budgets
    from ingestion_pipeline.documents.embedding import default_model_path
    from ingestion_pipeline.documents.extraction import extract
    from ingestion_pipeline.documents.tokens import load_token_counter

    settings = load_settings()
    counter = load_token_counter(default_model_path())
    target, hard_max = effective_budgets(settings.chunk.target_tokens, settings.chunk.max_tokens, counter)
    texts = []
    for path in files:
        document = extract(path, path.suffix)
        texts += [c.text for c in chunk_elements(document.elements, counter, target=target, hard_max=hard_max)]
    return sorted(texts, key=len)


class TorchEncoder:
    def __init__(self, model) -> None:
        self.model = model

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        return self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True)


def encoders(model_path: str, onnx_file: Path, model, texts: list[str]) -> dict[str, object]:
    """Every backend by name: the pipeline's own encoders, and its int8 models built as it builds them."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from ingestion_pipeline.documents import precision
    from ingestion_pipeline.documents.onnx_encoder import OnnxEncoder, OpenVinoEncoder
    from ingestion_pipeline.documents.quantization import INT8_ONNX, INT8_OPENVINO

    out: dict[str, object] = {"torch": TorchEncoder(model), "onnx": OnnxEncoder(model_path, onnx_file)}
    # ov-f32-latency: one batch at a time on all cores, OpenVINO's LATENCY hint; the others THROUGHPUT
    out["ov-f32"] = OpenVinoEncoder(model_path, onnx_file, "f32")
    out["ov-f32-latency"] = OpenVinoEncoder(model_path, onnx_file, "f32", hint="LATENCY")
    if precision._bf16_capable():
        out["ov-bf16"] = OpenVinoEncoder(model_path, onnx_file, "bf16")
    started = time.perf_counter()
    out["int8-openvino"] = precision.build_encoder(precision.Candidate("int8", "openvino", INT8_OPENVINO),
                                                   model_path, onnx_file)
    print(f"NNCF's int8 model built in {time.perf_counter() - started:.1f} s", flush=True)
    out["int8-onnx"] = precision.build_encoder(precision.Candidate("int8", "onnx", INT8_ONNX), model_path, onnx_file)
    per_tensor = onnx_file.parent / "int8-per-tensor.onnx"
    quantize_dynamic(str(onnx_file), str(per_tensor), weight_type=QuantType.QInt8)
    out["onnx-int8-tensor"] = OnnxEncoder(model_path, per_tensor)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=300)
    corpus = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "documents"
    parser.add_argument("--corpus", default=str(corpus))
    parser.add_argument("--only", nargs="*", help="only these backends (torch, onnx, ov-f32, ov-f32-latency, "
                        "ov-bf16, int8-openvino, int8-onnx, onnx-int8-tensor); ov-f32 is always measured")
    args = parser.parse_args()
    import torch
    from compare_peers import small_files
    from sentence_transformers import SentenceTransformer

    from ingestion_pipeline.documents.embedding import default_model_path, model_info
    from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS, exported_model
    from ingestion_pipeline.documents.quality_gate import (
        Measurement,
        judge,
        load_gate_texts,
        own_chunk_ranks,
        passages,
        top_k,
    )

    work = Path(tempfile.mkdtemp(prefix="ip-embed-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # the files, the export and its int8 models
    texts = our_chunks(small_files(Path(args.corpus), work / "small", args.files))
    model_path = default_model_path()
    model = SentenceTransformer(model_path, device="cpu")
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=256)["input_ids"])
    print(f"{len(texts)} chunks, {tokens} tokens; torch {torch.__version__}, {torch.get_num_threads()} threads "
          "by default", flush=True)
    onnx_file = exported_model(model_path, model_info(model_path).digest, work / "models")
    backends = encoders(model_path, onnx_file, model, texts)
    ov_threads = backends["ov-f32"]._compiled.get_property("INFERENCE_NUM_THREADS")
    settings = [("torch", threads, batch) for threads in (2, 1) for batch in (16, 32, 64)]
    settings += [("onnx", 2, 16), ("onnx", 2, 32), ("ov-f32", ov_threads, 16), ("ov-f32", ov_threads, 32),
                 ("ov-f32-latency", ov_threads, 16)]
    settings += [(name, ov_threads if name.startswith("ov") or name == "int8-openvino" else 2, 16)
                 for name in ("ov-bf16", "int8-openvino", "int8-onnx", "onnx-int8-tensor") if name in backends]
    if args.only:
        settings = [s for s in settings if s[0] in args.only or s[:3:2] == ("ov-f32", 16)]
    model.encode(texts[:64])
    times: dict[tuple, list[float]] = {}
    reference = model.encode(texts, batch_size=32, normalize_embeddings=True)
    passage_texts, owners = passages(texts)
    queries = load_gate_texts().queries
    cosine, quality = {}, {}
    for r in range(args.rounds):
        for setting in settings[r % len(settings):] + settings[:r % len(settings)]:
            backend, threads, batch = setting
            torch.set_num_threads(threads)
            encoder = backends[backend]
            start = time.perf_counter()
            vectors = encoder.encode(texts, batch)
            times.setdefault(setting, []).append(time.perf_counter() - start)
            cosine[setting] = float((vectors * reference).sum(1).min())
            if backend not in quality:
                ranks = own_chunk_ranks(encoder.encode(passage_texts, batch), vectors, owners)
                quality[backend] = Measurement(
                    probe_vectors=encoder.encode(PROBE_TEXTS, batch), recall_at_5=float(np.mean(ranks < 5)),
                    recall_at_10=float(np.mean(ranks < 10)), top10=top_k(encoder.encode(queries, batch), vectors),
                    seconds=0.0)
    baseline = quality["ov-f32"]
    print(f"\n{'backend':16} {'threads':>7} {'batch':>5} {'median s':>9} {'chunks/s':>9} {'s/1k tokens':>11} "
          f"{'min cos vs torch':>16} {'recall@5':>8} {'recall@10':>9} {'top-10 overlap':>14}  gate vs ov-f32")
    for setting in settings:
        median = statistics.median(times[setting])
        m = quality[setting[0]]
        verdict = judge(baseline, m)
        gate = "passes" if verdict.passed else "fails: " + "; ".join(verdict.failures)
        print(f"{setting[0]:16} {setting[1]:>7} {setting[2]:>5} {median:>9.1f} {len(texts) / median:>9.1f} "
              f"{median * 1000 / tokens:>11.3f} {cosine[setting]:>16.6f} {m.recall_at_5:>8.4f} "
              f"{m.recall_at_10:>9.4f} {verdict.top10_overlap:>14.3f}  {gate}")


if __name__ == "__main__":
    main()
