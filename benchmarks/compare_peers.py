"""Our document ingestion side by side with LangChain's and LlamaIndex's, on the same Postgres and model.

Scenarios (each system, interleaved, a fresh process per run so imports and the model load count):
300 small .md/.txt files cold; one of them modified; the same files unchanged; 8 medium documents
(pdf/md/txt/html) cold. LlamaIndex twice: as it comes (``SentenceSplitter()``, 1024-token chunks, which the
256-token model truncates) and configured to embed all its text (llamaindex-200: ``SentenceSplitter(chunk_size=200,
chunk_overlap=20)``). Plus the pure model baseline: our chunks (and LangChain's) encoded alone, batch
32, sorted by length, after the model is loaded. Prints the medians and the ratios.

    make bench-peers        # .venv-peers: the peers, in their own virtualenv (see peers-requirements.txt)
    .venv/bin/python benchmarks/compare_peers.py [--rounds 3] [--small-files 300] [--only ours]

Ours runs as ``ingest`` does (submit, then process through the Dagster job), each file under its name
as document key so a modified file becomes a new version, as LangChain's incremental cleanup and
LlamaIndex's docstore upserts treat it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
SYSTEMS = ("ours", "langchain", "llamaindex", "llamaindex-200")
PREFIXES = {"ours": "ou", "langchain": "la", "llamaindex": "ll", "llamaindex-200": "l2"}  # of table names
MEDIUM = ("layout-parser-paper-fast.pdf", "multi-column-2p.pdf", "reliance.pdf", "example-10k-1p.html",
          "ideas-page.html", "norwich-city.txt", "UDHR_first_article_all.txt", "eng_spa_mult.md")


def small_files(corpus: Path, out: Path, count: int) -> list[Path]:
    """``count`` files of ~2.5 KB cut at paragraph ends from the corpus's long text, .md and .txt alternately."""
    text = (corpus / "book-war-and-peace-1225p.txt").read_text(encoding="utf-8", errors="replace")
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 80]
    out.mkdir(parents=True)
    files, piece, i = [], [], 0
    for paragraph in paragraphs[200:]:
        piece.append(paragraph)
        if sum(len(p) for p in piece) < 2400:
            continue
        path = out / (f"part-{i:03d}.md" if i % 2 == 0 else f"part-{i:03d}.txt")
        body = "\n\n".join(piece)
        path.write_text(f"# Part {i}\n\n{body}\n" if path.suffix == ".md" else body + "\n", encoding="utf-8")
        files.append(path)
        piece, i = [], i + 1
        if i == count:
            break
    return files


# -- ours ---------------------------------------------------------------------------------------------
def run_ours(namespace: str, files: list[str]) -> dict:
    """Submit every file under its name as document key, then process: what ``ingest`` does."""
    import contextlib
    import io

    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.documents.intake import submit_uploads

    with bootstrap() as ctx:
        with ctx.db.connection() as conn:
            before = conn.execute("SELECT coalesce(max(file_id), 0) AS n FROM ingestion_runs").fetchone()["n"]
        submit_uploads(ctx.db, ctx.document_store, tenant_id=namespace, paths=[Path(name) for name in files],
                       keys=[Path(name).name for name in files], fingerprint=ctx.fingerprint,
                       max_bytes=ctx.settings.upload.max_bytes)
        with contextlib.redirect_stdout(io.StringIO()):
            process_queued(ctx, argparse.Namespace(json=True))
        with ctx.db.connection() as conn:
            row = conn.execute(
                """SELECT count(*) FILTER (WHERE status = 'failed') AS failed,
                          coalesce(sum((stats->>'embedded')::int), 0) AS embedded,
                          coalesce(sum((stats->>'model_ms')::int), 0) AS model_ms
                     FROM ingestion_runs WHERE tenant_id = %s AND file_id > %s""", (namespace, before)).fetchone()
            chunks = conn.execute(
                """SELECT count(*) AS n FROM chunks c JOIN document_versions v ON v.version_id = c.version_id
                    WHERE v.tenant_id = %s AND v.is_active""", (namespace,)).fetchone()["n"]
    return {"chunks": chunks, "embedded": row["embedded"], "failed": row["failed"], "model_s": row["model_ms"] / 1000}


def model_baseline(url: str, ours: str, langchain: str, llamaindex: str) -> dict:
    """Our active chunks, LangChain's and LlamaIndex's, encoded alone by torch (batch 32, sorted by length)
    after the model loaded."""
    import psycopg
    from psycopg import sql
    from sentence_transformers import SentenceTransformer

    from ingestion_pipeline.documents.embedding import default_model_path

    model = SentenceTransformer(default_model_path(), device="cpu")
    model.encode(["warm up"])
    with psycopg.connect(url) as conn:
        mine = [r[0] for r in conn.execute(
            """SELECT c.text FROM chunks c JOIN document_versions v ON v.version_id = c.version_id
                WHERE v.tenant_id = %s AND v.is_active""", (ours,))]
        theirs = [r[0] for r in conn.execute(
            """SELECT e.document FROM langchain_pg_embedding e
                 JOIN langchain_pg_collection c ON c.uuid = e.collection_id
                WHERE c.name = %s""", (langchain,))] if _has_table(conn, "langchain_pg_embedding") else []
        table = f"data_{llamaindex}"
        nodes = [r[0] for r in conn.execute(sql.SQL("SELECT text FROM {}").format(
            sql.Identifier(table)))] if _has_table(conn, table) else []
    figures = {}
    for label, texts in (("ours", mine), ("langchain", theirs), ("llamaindex", nodes)):
        if not texts:
            continue
        texts = sorted(texts, key=len)
        tokens = model.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
        start = time.perf_counter()
        model.encode(texts, batch_size=32, normalize_embeddings=True)
        seconds = time.perf_counter() - start
        limit = model.max_seq_length
        figures[label] = {"chunks": len(texts), "tokens": sum(min(len(t), limit) for t in tokens),
                          "truncated": sum(len(t) > limit for t in tokens), "encode_s": seconds}
    if mine:  # and our chunks encoded alone by the backend our runs use (INGESTION_EMBEDDING_BACKEND)
        from ingestion_pipeline.documents.embedding import build_embedder

        embedder = build_embedder()
        embedder.embed(["warm up"])
        start = time.perf_counter()
        embedder.embed(sorted(mine, key=len))
        figures["ours"].update(own_backend=embedder.backend_in_use, own_encode_s=time.perf_counter() - start)
    return figures


def _has_table(conn, name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


# -- the harness ----------------------------------------------------------------------------------------
def scratch_environment(prefix: str) -> tuple[Path, dict]:
    """A throwaway data folder (its own embedded Postgres) and Dagster home, made this process's
    environment; returns the folder and that environment, for the child processes."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    env = {**os.environ, "INGESTION_DATA_DIR": str(work / "data"), "DAGSTER_HOME": str(work / "dagster_home")}
    for name in ("DATABASE_URL", "DAGSTER_PG_URL"):
        env.pop(name, None)
        os.environ.pop(name, None)
    (work / "dagster_home").mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
    os.environ.update(env)
    return work, env


def prepare_model(env: dict) -> None:
    """The one-time ONNX export of the model (per machine and model, like installing it), outside the timings."""
    code = "from ingestion_pipeline.documents.embedding import build_embedder; e = build_embedder(); e.embed(['x']); " \
           "print(e.backend_in_use)"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    print(f"model prepared once, before the timed runs ({done.stdout.strip()}): {time.perf_counter() - start:.1f} s",
          flush=True)


def timed(system: str, namespace: str, files: list[Path], env: dict, state_dir: Path) -> dict:
    names = [str(f) for f in files]
    if system == "ours":
        command = [sys.executable, __file__, "_ours", namespace, *names]
    else:
        from ingestion_pipeline.documents.embedding import default_model_path

        command = [str(PEERS_PYTHON), str(ROOT / "benchmarks" / "peer_ingest.py"), system, "--url",
                   env["DATABASE_URL"], "--namespace", namespace, "--model", default_model_path(),
                   "--state-dir", str(state_dir), *names]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        errors = [line[:400] for line in done.stderr.splitlines() if "Error" in line]
        raise SystemExit(f"{system} failed ({namespace}):\n" + "\n".join(errors[-5:] or [done.stderr[-2000:]]))
    return {"seconds": seconds, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_ours":
        print(json.dumps(run_ours(sys.argv[2], sys.argv[3:])))
        gc.freeze()  # and exit as the `ingestion-pipeline` executable does (cli.run)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus" / "documents"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small-files", type=int, default=300)
    parser.add_argument("--only", choices=SYSTEMS, action="append", help="run only these systems (repeatable)")
    args = parser.parse_args()
    systems = tuple(args.only or SYSTEMS)
    if set(systems) - {"ours"} and not PEERS_PYTHON.exists():
        raise SystemExit("the peers are not installed: run `make bench-peers` first (or pass --only ours)")

    work, env = scratch_environment("ip-peers-")
    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

    corpus = Path(args.corpus)
    medium = [corpus / name for name in MEDIUM]
    results: dict[tuple[str, str], list[dict]] = {}
    baseline: list[dict] = []
    try:
        with bootstrap() as ctx:  # the embedded Postgres all three use, with pgvector and our schema
            env["DATABASE_URL"] = ctx.url
        prepare_model(env)
        for r in range(args.rounds):
            small = small_files(corpus, work / f"small-{r}", args.small_files)
            order = systems[r % len(systems):] + systems[:r % len(systems)]  # interleaved: each goes first once
            for scenario, files, namespace in (("300 small files, cold", small, f"small{r}"),
                                               ("one file modified", small, f"small{r}"),
                                               ("unchanged re-run", small, f"small{r}"),
                                               ("8 medium documents, cold", medium, f"medium{r}")):
                if scenario == "one file modified":
                    small[-1].write_text(small[-1].read_text() + "\nA sentence added to this part.\n")
                    files = small  # every system is handed the whole folder again, as a user would
                for system in order:
                    figures = timed(system, f"{PREFIXES[system]}_{namespace}", files, env, work / "state")
                    results.setdefault((scenario, system), []).append(figures)
                    print(f"round {r + 1} {scenario:26} {system:10} {figures['seconds']:6.1f} s  "
                          f"{json.dumps({k: v for k, v in figures.items() if k != 'seconds'})}", flush=True)
            baseline.append(_baseline(env, f"small{r}", systems))
        _print_table(results, systems, baseline, args.small_files)
    finally:
        stop_embedded_postgres(work / "data" / "pgdata")
        shutil.rmtree(work, ignore_errors=True)


def _baseline(env: dict, namespace: str, systems: tuple[str, ...]) -> dict:
    names = ", ".join(repr(f"{prefix}_{namespace}") for prefix in ("ou", "la", "ll"))
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import compare_peers as c; "
            f"print(json.dumps(c.model_baseline({env['DATABASE_URL']!r}, {names})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for label, f in figures.items():
        print(f"model alone, {label}'s chunks of {namespace}: {f['chunks']} chunks, {f['tokens']} tokens "
              f"({f['truncated']} longer than the model reads), encode {f['encode_s']:.1f} s", flush=True)
    return figures


def _print_table(results: dict, systems: tuple[str, ...], baseline: list[dict], n_small: int) -> None:
    def median(scenario: str, system: str) -> float | None:
        runs = results.get((scenario, system))
        return statistics.median(r["seconds"] for r in runs) if runs else None

    print()
    print(f"{'scenario':28}" + "".join(f"{s:>15}" for s in systems) + "   ours ÷ best peer")
    for scenario in dict.fromkeys(s for s, _ in results):
        cells = {s: median(scenario, s) for s in systems}
        peers = [v for s, v in cells.items() if s != "ours" and v is not None]
        ratio = f"{cells['ours'] / min(peers):.2f}×" if peers and cells.get("ours") else ""
        print(f"{scenario:28}" + "".join(f"{v:>13.1f} s" if v is not None else f"{'-':>15}" for v in cells.values())
              + f"   {ratio}")
    ours_cold = results.get(("300 small files, cold", "ours"))
    encode = [b["ours"]["encode_s"] for b in baseline if "ours" in b]
    if ours_cold and encode:
        model_load = statistics.median(r.get("model_s", 0) for r in ours_cold)
        wall = statistics.median(r["seconds"] for r in ours_cold)
        pure = statistics.median(encode)
        print(f"\nours, {n_small} small files cold: {wall:.1f} s wall vs {pure:.1f} s of pure encode "
              f"({wall / pure:.2f}×); time in the model during the run {model_load:.1f} s; "
              f"overhead beyond pure encode {(wall - pure) * 1000 / n_small:.0f} ms per file "
              f"(includes process start, imports and the model load)")
    own = [b["ours"]["own_encode_s"] for b in baseline if "own_encode_s" in b.get("ours", {})]
    if ours_cold and own:
        pure, wall = statistics.median(own), statistics.median(r["seconds"] for r in ours_cold)
        backend = baseline[0]["ours"]["own_backend"]
        print(f"ours, against our own backend ({backend}) encoding the same chunks alone in {pure:.1f} s: "
              f"{wall / pure:.2f}×, overhead {(wall - pure) * 1000 / n_small:.0f} ms per file")
    for b in baseline:
        print("model alone, per 1k tokens it reads: " + "; ".join(
            f"{label} {f['encode_s'] * 1000 / f['tokens']:.3f} s ({f['truncated']} of {f['chunks']} chunks longer "
            "than the model reads: their ends are never embedded)" for label, f in b.items()))


if __name__ == "__main__":
    main()
