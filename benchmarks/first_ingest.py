"""The first ingest of a fresh data folder, beside what the model alone needs for the same chunks.

A new user's first `ingest` (or a fresh worker host's first run) should cost what its model work costs, not
minutes of one-time preparation. This makes a throwaway data folder (its own embedded Postgres), runs
`ingestion-pipeline model prepare` once (timed apart: the export and, where this CPU could run a reduced
precision faster, the judging), then ingests N small files in a fresh process (submit, then process through
the Dagster job, as `ingest` does) and encodes the same active chunks with the model alone, after it loaded,
in the backend the runs use, and by sentence-transformers on torch (the model-only baseline of
``compare_peers.py``). Prints the seconds and both ratios.

    .venv/bin/python benchmarks/first_ingest.py [--small-files 200] [--precision P] [--no-prepare]

``--no-prepare`` skips `model prepare` (the deployment's first process then records float32 itself); run
with ``PYTHONPATH`` at an older checkout to time that code's first ingest the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare_peers import scratch_environment, small_files  # noqa: E402


def model_only(env: dict, namespace: str) -> dict:
    """The active chunks of ``namespace`` encoded by the configured model alone, after it loaded."""
    code = f"""
import json, time
from ingestion_pipeline import services
from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.settings import load_settings
with connect({env['DATABASE_URL']!r}, autocommit=True) as conn:
    texts = [r['text'] for r in conn.execute(
        "SELECT c.text FROM chunks c JOIN document_versions v ON v.version_id = c.version_id "
        "WHERE v.tenant_id = %s AND v.is_active", ({namespace!r},))]
try:
    embedder = services.embedder(load_settings(), database_url={env['DATABASE_URL']!r})
except TypeError:  # an older checkout (PYTHONPATH), from before the recorded model decision
    embedder = services.embedder(load_settings())
embedder.embed(['warm up'])
start = time.perf_counter()
embedder.embed(sorted(texts, key=len))
own = time.perf_counter() - start
from sentence_transformers import SentenceTransformer
from ingestion_pipeline.documents.embedding import default_model_path
torch_model = SentenceTransformer(default_model_path(), device="cpu")
torch_model.encode(["warm up"])
start = time.perf_counter()
torch_model.encode(sorted(texts, key=len), batch_size=32, normalize_embeddings=True)
print(json.dumps({{"chunks": len(texts), "encode_s": own, "torch_s": time.perf_counter() - start,
                  "backend": embedder.backend_in_use, "precision": embedder.info.precision}}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus" / "documents"))
    parser.add_argument("--small-files", type=int, default=200)
    parser.add_argument("--no-prepare", action="store_true")
    parser.add_argument("--precision", choices=("auto", "int8", "bf16", "f32"), default=None,
                        help="what `model prepare` asks for (default INGESTION_EMBEDDING_PRECISION, auto)")
    args = parser.parse_args()
    work, env = scratch_environment("ip-first-ingest-")
    try:
        files = small_files(Path(args.corpus), work / "files", args.small_files)
        cli = [str(Path(sys.executable).parent / "ingestion-pipeline")]
        url = subprocess.run(cli + ["db", "url"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        env["DATABASE_URL"] = url
        prepare_s = None
        if not args.no_prepare:
            start = time.perf_counter()
            asked = ["--precision", args.precision] if args.precision else []
            done = subprocess.run(cli + ["model", "prepare", "--json", *asked], env=env, capture_output=True,
                                  text=True, check=True)
            prepare_s = time.perf_counter() - start
            decision = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"model prepare: {prepare_s:.1f} s -> {decision['precision']} on {decision['runtime']} "
                  f"({decision['outcome']}; " + "; ".join(f"{e['candidate']}: {e['why_not'] or 'passes'}"
                                                         for e in decision["evaluations"]) + ")", flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_peers.py"), "_ours", "first",
                               *map(str, files)], env=env, capture_output=True, text=True)
        ingest_s = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        ours = json.loads(done.stdout.strip().splitlines()[-1])
        alone = model_only(env, "first")
        ratio = ingest_s / alone["encode_s"]
        torch_ratio = ingest_s / alone["torch_s"]
        print(f"first ingest of {len(files)} small files in a fresh data folder: {ingest_s:.1f} s "
              f"({ours['chunks']} chunks, {ours['failed']} failed; the runs' model time {ours['model_s']:.1f} s)")
        print(f"the same {alone['chunks']} chunks, the model alone ({alone['precision']} on {alone['backend']}, "
              f"loaded): {alone['encode_s']:.1f} s")
        print(f"the same chunks by sentence-transformers on torch alone (batch 32, the peers' baseline in "
              f"compare_peers.py): {alone['torch_s']:.1f} s")
        print(f"first ingest / model alone: {ratio:.2f} (our backend), {torch_ratio:.2f} (torch)")
        print(json.dumps({"files": len(files), "prepare_s": prepare_s, "ingest_s": round(ingest_s, 2),
                          "model_alone_s": round(alone["encode_s"], 2), "ratio": round(ratio, 3),
                          "torch_alone_s": round(alone["torch_s"], 2), "torch_ratio": round(torch_ratio, 3),
                          "precision": alone["precision"], "backend": alone["backend"]}))
    finally:
        subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "db", "stop"], env=env,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
