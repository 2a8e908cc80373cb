"""sentence-transformers' own ONNX backend (``backend="onnx"``, exported by Optimum) beside the pipeline's own
export (``documents/onnx_encoder.py``), in one run on the same chunks.

Why a second virtualenv: sentence-transformers' ONNX backend needs ``optimum-onnx``, whose only release
requires ``transformers<4.58``; the pipeline runs sentence-transformers 6 on transformers 5, so the backend
cannot be installed beside it. ``make bench-st-backends`` builds ``.venv-st`` from
``benchmarks/st-backends-requirements.txt`` and runs this script, which runs sentence-transformers' side in
that interpreter (``--child``) and the pipeline's side here.

Printed per setting: the cold start of a new process (imports + model load + the first vector, median of
``--starts`` processes), the encode time of every chunk (median of ``--rounds``), chunks/s, and the lowest
cosine with torch's vectors of the same chunks (sentence-transformers on torch, this venv).

    make bench-st-backends        # or: .venv/bin/python benchmarks/st_backends.py --st-python .venv-st/bin/python
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD_START = """
import sys, time
t = time.perf_counter()
from sentence_transformers import SentenceTransformer
m = SentenceTransformer(sys.argv[1], backend="onnx", device="cpu", model_kwargs={"file_name": sys.argv[2]})
m.encode(["x"])
print(time.perf_counter() - t)
"""

OURS_START = """
import sys, time
t = time.perf_counter()
from pathlib import Path
from ingestion_pipeline.documents.embedding import Embedder, default_model_path
e = Embedder(default_model_path(), 16, backend=sys.argv[1], cache_dir=Path(sys.argv[2]))
e.embed(["x"])
print(time.perf_counter() - t)
"""


def child(model_dir: str, texts_file: str, out_dir: str, rounds: int) -> None:
    """Under the sentence-transformers venv: export with Optimum (float32 and its AVX2 dynamic int8), time
    encoding, write the vectors."""
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    texts = json.loads(Path(texts_file).read_text())
    started = time.perf_counter()
    model = SentenceTransformer(model_dir, backend="onnx", device="cpu")
    model.save_pretrained(model_dir)  # keeps the export, so the cold starts load it
    export_seconds = time.perf_counter() - started
    export_dynamic_quantized_onnx_model(model, "avx2", model_dir)
    result = {"export_seconds": export_seconds}
    for name, file_name in (("st-onnx", "onnx/model.onnx"), ("st-onnx-int8-avx2", "onnx/model_quint8_avx2.onnx")):
        encoder = SentenceTransformer(model_dir, backend="onnx", device="cpu", model_kwargs={"file_name": file_name})
        encoder.encode(texts[:64])
        for batch in (16, 32):
            seconds = []
            for _ in range(rounds):
                start = time.perf_counter()
                vectors = encoder.encode(texts, batch_size=batch, normalize_embeddings=True)
                seconds.append(time.perf_counter() - start)
            result[f"{name}/{batch}"] = seconds
            np.save(Path(out_dir) / f"{name}.npy", vectors)
    Path(out_dir, "child.json").write_text(json.dumps(result))


def cold_starts(command: list[str], starts: int) -> float:
    times = []
    for _ in range(starts):
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--st-python", default=".venv-st/bin/python")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--files", type=int, default=300)
    corpus = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "documents"
    parser.add_argument("--corpus", default=str(corpus))
    parser.add_argument("--child", nargs=4, metavar=("MODEL_DIR", "TEXTS", "OUT", "ROUNDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child[:3], int(args.child[3]))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compare_peers import small_files
    from embedding_backends import our_chunks
    from sentence_transformers import SentenceTransformer

    from ingestion_pipeline.documents.embedding import default_model_path, model_info
    from ingestion_pipeline.documents.onnx_encoder import OnnxEncoder, OpenVinoEncoder, exported_model

    versions = ("import sentence_transformers, transformers, optimum.onnxruntime;"
                "print(sentence_transformers.__version__, transformers.__version__)")
    st_version = subprocess.run([args.st_python, "-c", versions], capture_output=True, text=True,
                                check=True).stdout.split()
    work = Path(tempfile.mkdtemp(prefix="ip-st-backends-"))
    try:
        texts = our_chunks(small_files(Path(args.corpus), work / "small", args.files))
        (work / "texts.json").write_text(json.dumps(texts))
        model_path = default_model_path()
        model_dir = work / "model"
        shutil.copytree(model_path, model_dir)
        print(f"{len(texts)} chunks; sentence-transformers' side: sentence-transformers {st_version[0]}, "
              f"transformers {st_version[1]} ({args.st_python})", flush=True)
        started = time.perf_counter()
        onnx_file = exported_model(model_path, model_info(model_path).digest, work / "models")
        ours_export = time.perf_counter() - started
        subprocess.run([args.st_python, __file__, "--child", str(model_dir), str(work / "texts.json"), str(work),
                        str(args.rounds)], check=True)
        theirs = json.loads((work / "child.json").read_text())
        reference = SentenceTransformer(model_path, device="cpu").encode(texts, batch_size=32,
                                                                          normalize_embeddings=True)
        ours = {"ov-f32": OpenVinoEncoder(model_path, onnx_file, "f32"), "onnx": OnnxEncoder(model_path, onnx_file)}
        rows = []
        for name, encoder in ours.items():
            encoder.encode(texts[:64], 16)
            for batch in (16, 32):
                seconds = []
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    vectors = encoder.encode(texts, batch)
                    seconds.append(time.perf_counter() - start)
                rows.append((f"pipeline {name}", batch, statistics.median(seconds),
                             float((vectors * reference).sum(1).min())))
        for name in ("st-onnx", "st-onnx-int8-avx2"):
            vectors = np.load(work / f"{name}.npy")
            for batch in (16, 32):
                rows.append((name, batch, statistics.median(theirs[f"{name}/{batch}"]),
                             float((vectors * reference).sum(1).min())))
        cold = {
            "pipeline ov-f32": cold_starts([sys.executable, "-c", OURS_START, "openvino", str(work / "models")],
                                           args.starts),
            "pipeline onnx": cold_starts([sys.executable, "-c", OURS_START, "onnx", str(work / "models")], args.starts),
            "st-onnx": cold_starts([args.st_python, "-c", CHILD_START, str(model_dir), "onnx/model.onnx"], args.starts),
            "st-onnx-int8-avx2": cold_starts([args.st_python, "-c", CHILD_START, str(model_dir),
                                              "onnx/model_quint8_avx2.onnx"], args.starts),
        }
        print(f"\nexport: pipeline {ours_export:.1f} s (torch trace + ONNX Runtime's check), "
              f"sentence-transformers/Optimum {theirs['export_seconds']:.1f} s")
        print(f"\n{'setting':22} {'batch':>5} {'encode s':>9} {'chunks/s':>9} {'min cos vs torch':>17} "
              f"{'cold start s':>13}")
        for name, batch, median, cosine in rows:
            print(f"{name:22} {batch:>5} {median:>9.2f} {len(texts) / median:>9.1f} {cosine:>17.6f} "
                  f"{cold[name]:>13.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
