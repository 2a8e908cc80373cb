"""Encode speed of the embedding model on this machine: batch sizes, torch threads, ONNX Runtime, OpenVINO.

The texts are our own chunks of the 300 small files compare_peers.py builds (extracted and chunked as
the pipeline does), encoded sorted by length as the embed step does. Each setting is timed in
interleaved rounds (median printed). ONNX Runtime runs the same weights exported offline with
``torch.onnx``, and the same export with its weights quantised to int8 (``quantize_dynamic``); OpenVINO runs
the float32 export in float32 (ov-f32, as the pipeline runs it: OpenVINO's THROUGHPUT hint, a batch per
stream; ov-f32-latency: one batch at a time over all cores) and in bfloat16 (ov-bf16, where the CPU has
AVX512_BF16 or AMX). Each
setting's vectors are compared with torch's (cosine), and retrieval with them is measured as known-item
recall@5: 12-word passages from a quarter, a third and half of the way into every chunk, searched against
all chunks (the pipeline makes a reduced precision its default only if this recall is identical to torch's).

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


class OnnxEncoder:
    """The model's transformer exported to ONNX; mean pooling and normalisation as sentence-transformers does."""

    def __init__(self, model, folder: Path, threads: int, int8: bool = False) -> None:
        import onnxruntime as ort
        import torch

        class LastHidden(torch.nn.Module):
            def __init__(self, bert) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                 token_type_ids=token_type_ids).last_hidden_state

        self.tokenizer, self.max_length = model.tokenizer, model.max_seq_length
        names = ["input_ids", "attention_mask", "token_type_ids"]
        sample = self.tokenizer(["a", "b c"], padding=True, return_tensors="pt")
        path = folder / "model.onnx"
        torch.onnx.export(LastHidden(model[0].auto_model.eval()), tuple(sample[n] for n in names), str(path),
                          input_names=names, output_names=["hidden"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "hidden"]})
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantised = folder / "model.int8.onnx"
            quantize_dynamic(str(path), str(quantised), weight_type=QuantType.QInt8)
            path = quantised
        self.path = path
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, inputs)[0]

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=self.max_length,
                                   return_tensors="np")
            inputs = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = self.run(inputs)
            mask = batch["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.vstack(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=300)
    corpus = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "documents"
    parser.add_argument("--corpus", default=str(corpus))
    parser.add_argument("--only", nargs="*", help="only these backends (torch, onnx, onnx-int8, ov-f32, "
                        "ov-f32-latency, ov-bf16)")
    args = parser.parse_args()
    import torch
    from compare_peers import small_files
    from sentence_transformers import SentenceTransformer

    from ingestion_pipeline.documents.embedding import default_model_path
    from ingestion_pipeline.documents.onnx_encoder import OpenVinoEncoder

    work = Path(tempfile.mkdtemp(prefix="ip-embed-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # the files and two exports: ~110 MB
    texts = our_chunks(small_files(Path(args.corpus), work / "small", args.files))
    model = SentenceTransformer(default_model_path(), device="cpu")
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=256)["input_ids"])
    print(f"{len(texts)} chunks, {tokens} tokens; torch {torch.__version__}, {torch.get_num_threads()} threads "
          "by default", flush=True)
    model.encode(texts[:64])
    settings = [("torch", threads, batch) for threads in (2, 1) for batch in (16, 32, 64)]
    onnx = {"onnx": OnnxEncoder(model, work, threads=2), "onnx-int8": OnnxEncoder(model, work, threads=2, int8=True)}
    # OpenVINO: the pipeline's own encoder (its tokenizer, pooling and OpenVINO's default thread count)
    # (ov-f32-latency: one batch at a time on all cores, OpenVINO's LATENCY hint; the others THROUGHPUT)
    for name, precision, hint in (("ov-f32", "f32", "THROUGHPUT"), ("ov-f32-latency", "f32", "LATENCY"),
                                  ("ov-bf16", "bf16", "THROUGHPUT")):
        onnx[name] = OpenVinoEncoder(default_model_path(), onnx["onnx"].path, precision, hint=hint)
    ov_threads = onnx["ov-f32"]._compiled.get_property("INFERENCE_NUM_THREADS")
    settings += [("onnx", 2, 16), ("onnx", 2, 32), ("onnx-int8", 2, 16), ("ov-f32", ov_threads, 16),
                 ("ov-f32", ov_threads, 32), ("ov-f32-latency", ov_threads, 16), ("ov-bf16", ov_threads, 16),
                 ("ov-bf16", ov_threads, 32)]
    if args.only:
        settings = [s for s in settings if s[0] in args.only]
    times: dict[tuple, list[float]] = {}
    reference = model.encode(texts, batch_size=32, normalize_embeddings=True)
    cosine, recall = {}, {}
    for r in range(args.rounds):
        for setting in settings[r % len(settings):] + settings[:r % len(settings)]:
            backend, threads, batch = setting
            torch.set_num_threads(threads)
            start = time.perf_counter()
            if backend == "torch":
                vectors = model.encode(texts, batch_size=batch, normalize_embeddings=True)
            else:
                vectors = onnx[backend].encode(texts, batch)
            times.setdefault(setting, []).append(time.perf_counter() - start)
            cosine[setting] = float((vectors * reference).sum(1).min())
            if r == 0:
                recall[backend] = known_item_recall(texts, vectors, lambda q, b=backend, n=batch: (
                    model.encode(q, batch_size=n, normalize_embeddings=True) if b == "torch" else onnx[b].encode(q, n)))
    print(f"\n{'backend':15} {'threads':>7} {'batch':>5} {'median s':>9} {'chunks/s':>9} {'s/1k tokens':>11} "
          f"{'min cosine vs torch':>20} {'recall@5':>9}")
    for setting in settings:
        median = statistics.median(times[setting])
        print(f"{setting[0]:15} {setting[1]:>7} {setting[2]:>5} {median:>9.1f} {len(texts) / median:>9.1f} "
              f"{median * 1000 / tokens:>11.3f} {cosine[setting]:>20.6f} {recall[setting[0]]:>9.4f}")


def known_item_recall(texts: list[str], vectors: np.ndarray, encode) -> float:
    """Share of passages whose own chunk is among the 5 nearest: from every chunk, the 12 words a quarter,
    a third and half of the way in (the same passages for every backend)."""
    passages = []
    for text in texts:
        words = text.split()
        passages += [" ".join(words[len(words) // part:len(words) // part + 12]) for part in (4, 3, 2)]
    own = np.repeat(np.arange(len(texts)), 3)
    scores = encode(passages) @ vectors.T
    rank = (scores > scores[np.arange(len(own)), own][:, None]).sum(axis=1)
    return float(np.mean(rank < 5))


if __name__ == "__main__":
    main()
