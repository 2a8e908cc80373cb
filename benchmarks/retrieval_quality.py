"""Retrieval quality on the project's question set: ours beside the default recipe and the peers' default
retrievers, all on the same model, in one run.

The question set (benchmarks/retrieval/questions.jsonl) holds questions over the sample corpus, paraphrased
and keyword-style, on every large document, French included; each answer is a span of its document's text,
judged by ``documents/search_eval.py`` on the passages each system returns (whatever its chunks). Every other
question is held out: settings are chosen on the tuning half (``--sweep``) and the held-out half says
whether the choice generalises.

Systems:
- ours: ``submit`` + ``process`` of the documents (as ``ingest``), then ``search -k 10`` for each question;
- recipe: the default twenty-line recipe: the documents' plain text (the same extraction as ours), 1,000-character
  windows overlapping by 200, the same MiniLM, exact cosine;
- langchain, llamaindex: their getting-started retrievers (benchmarks/peer_retrieval.py, in .venv-peers:
  ``make bench-peers`` installs it).

    .venv/bin/python benchmarks/retrieval_quality.py [--systems ours,recipe,langchain,llamaindex]
        [--data-dir DIR] [--sweep] [--json FILE]

``--data-dir`` keeps the knowledge base (and the recipe's vectors) between runs: unchanged files are skipped.
Prints hit@1, hit@3, MRR@10 and nDCG@10 overall, per kind, for French, for the held-out half, and search
latency (p50/p95, warm: each question asked twice, the second timed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "benchmarks" / "retrieval" / "questions.jsonl"
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
# documents with no question: what else a knowledge base holds, so that a search must find the right one
DISTRACTORS = ("embedded-images-tables.pdf", "eng_spa_mult.md", "ideas-page.html", "fake-memo.pdf",
               "docx-tables.docx")
TENANT = "retrieval"


def default_corpus() -> Path:
    found = os.environ.get("INGESTION_CORPUS_DIR") or next(
        (str(p) for p in (ROOT.parent / "shared" / "corpus", Path("/work/shared/corpus")) if p.is_dir()), "")
    return Path(found) / "documents"


def knowledge_base_files(corpus: Path, questions) -> list[Path]:
    names = sorted({q.document for q in questions} | set(DISTRACTORS))
    missing = [n for n in names if not (corpus / n).is_file()]
    if missing:
        sys.exit(f"not in {corpus}: {', '.join(missing)} (--corpus names the corpus's documents folder)")
    return [corpus / n for n in names]


def set_up_data_dir(data_dir: Path | None) -> tuple[Path, bool]:
    """The folder of the knowledge base (embedded Postgres, uploads, Dagster's instance); whether to remove it."""
    work = data_dir or Path(tempfile.mkdtemp(prefix="ip-retrieval-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["INGESTION_DATA_DIR"] = str(work)
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("DAGSTER_PG_URL", None)
    os.environ.setdefault("INGESTION_EMBEDDING_PRECISION", "f32")
    home = work / "dagster_home"
    home.mkdir(exist_ok=True)
    from ingestion_pipeline.core.settings import instance_home

    shutil.copy(instance_home() / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return work, data_dir is None


@contextlib.contextmanager
def knowledge_base_folder(data_dir: Path | None) -> Iterator[Path]:
    """``set_up_data_dir``'s folder for the benchmark's run: its embedded Postgres stopped at the end, and the
    folder removed unless it was given (``--data-dir`` keeps the knowledge base between runs)."""
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

    work, remove = set_up_data_dir(data_dir)
    try:
        yield work
    finally:
        stop_embedded_postgres(work / "pgdata")
        if remove:
            shutil.rmtree(work, ignore_errors=True)


# -- ours ----------------------------------------------------------------------------------------------
def ingest_ours(ctx, files: list[Path]) -> dict:
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.documents.intake import submit_uploads

    start = time.perf_counter()
    submit_uploads(ctx.db, ctx.document_store, tenant_id=TENANT, paths=files, keys=[p.name for p in files],
                   fingerprint=ctx.fingerprint, max_bytes=ctx.settings.upload.max_bytes)
    with contextlib.redirect_stdout(io.StringIO()):
        process_queued(ctx, argparse.Namespace(json=True))
    # what autovacuum does within minutes of a load (statistics, the visibility map): searched at once, the
    # planner would still see the empty tables of the build's start (search p50 60 / p95 128 ms against 11 / 25)
    import psycopg

    with psycopg.connect(ctx.db.url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    with ctx.db.connection() as conn:
        row = conn.execute(
            """SELECT count(*) AS documents, coalesce(sum(chunk_count), 0) AS chunks
                 FROM document_versions WHERE tenant_id = %s AND is_active""", (TENANT,)).fetchone()
        failed = conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE tenant_id = %s AND status <> 'succeeded'"
                              " AND run_id = (SELECT max(run_id) FROM ingestion_runs r2 WHERE r2.doc_id = "
                              "ingestion_runs.doc_id)", (TENANT,)).fetchone()["n"]
    return {"documents": row["documents"], "chunks": int(row["chunks"]), "failed": failed,
            "ingest_s": time.perf_counter() - start}


def ask_ours(ctx, questions, settings=None) -> tuple[dict[str, list[str]], list[float], list[float]]:
    """Each question's top-10 passages; search milliseconds (warm) without and with the query's embedding."""
    from ingestion_pipeline.documents.search import hybrid_search

    model = ctx.embedder.info.name
    embedders = ctx.query_embedders  # a knowledge base in the middle of a model change: every model's vectors
    vectors = {q.id: ctx.embedder.embed([q.question])[0] for q in questions}
    passages, search_ms, total_ms = {}, [], []
    with ctx.db.connection() as conn:
        for timed in (False, True):
            for q in questions:
                start = time.perf_counter()
                vector = ctx.embedder.embed([q.question])[0] if timed else vectors[q.id]
                embedded = time.perf_counter()
                hits = hybrid_search(conn, tenant_id=TENANT, query=q.question, query_vector=vector, model=model,
                                     k=10, other_models=embedders.for_query(q.question),
                                     **({"settings": settings} if settings else {}))
                done = time.perf_counter()
                if timed:
                    search_ms.append((done - embedded) * 1000)
                    total_ms.append((done - start) * 1000)
                passages[q.id] = [h.text for h in hits]
    return passages, search_ms, total_ms


# -- the default recipe -------------------------------------------------------------------------------
def recipe(ctx, files: list[Path], questions, cache: Path) -> tuple[dict[str, list[str]], int, list[float]]:
    """Plain text, 1,000-character windows with 200 overlap, exact cosine over normalised vectors."""
    import numpy as np

    from ingestion_pipeline.documents.extraction import extract

    windows: list[str] = []
    for path in files:
        text = "\n".join(el.text for el in extract(path, path.suffix, ctx.settings.limits).elements)
        windows += [text[i:i + 1000] for i in range(0, max(len(text) - 200, 1), 800)]
    key = hashlib.sha256("\x1e".join(windows).encode()).hexdigest()[:16]
    stored = cache / f"recipe-{key}.npy"
    if stored.exists():
        matrix = np.load(stored)
    else:
        matrix = np.asarray(ctx.embedder.embed(windows), dtype=np.float32)
        np.save(stored, matrix)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    passages, ms = {}, []
    for q in questions:
        start = time.perf_counter()
        v = np.asarray(ctx.embedder.embed([q.question])[0], dtype=np.float32)
        order = np.argsort(-(matrix @ (v / np.linalg.norm(v))))[:10]
        ms.append((time.perf_counter() - start) * 1000)
        passages[q.id] = [windows[i] for i in order]
    return passages, len(windows), ms


def model_folder(ctx) -> str:
    from ingestion_pipeline.documents.embedding import resolve_model_path

    return resolve_model_path(ctx.settings.embedding.model_path)


# -- the peers ----------------------------------------------------------------------------------------
def peer(system: str, model: str, files: list[Path]) -> tuple[dict[str, list[str]], int, list[float]] | None:
    if not PEERS_PYTHON.exists():
        print(f"{system}: skipped (no .venv-peers: `make bench-peers` installs the peers)")
        return None
    result = subprocess.run(
        [str(PEERS_PYTHON), str(ROOT / "benchmarks" / "peer_retrieval.py"), system, "--model", model,
         "--questions", str(QUESTIONS), *map(str, files)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"{system}: failed\n{result.stderr[-2000:]}")
        return None
    out = json.loads(result.stdout.strip().splitlines()[-1])
    return out["passages"], out["chunks"], out["query_ms"]


# -- figures ------------------------------------------------------------------------------------------
def evaluate(questions, passages: dict[str, list[str]]) -> dict:
    from ingestion_pipeline.documents.search_eval import answer_rank, report

    ranks = {q.id: answer_rank(passages.get(q.id, []), q.answer) for q in questions}
    figures = {name: f.as_dict() for name, f in report(questions, ranks).items()}
    held = [q for q in questions if q.held_out]
    figures["held-out"] = report(held, ranks)["all"].as_dict()
    figures["tuning"] = report([q for q in questions if not q.held_out], ranks)["all"].as_dict()
    figures["misses"] = sorted(q.id for q in questions if ranks[q.id] is None or ranks[q.id] > 3)
    return figures


def p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def print_table(rows: list[tuple[str, dict, dict]]) -> None:
    print(f"\n{'system':<24} {'hit@1':>6} {'hit@3':>6} {'MRR@10':>7} {'nDCG@10':>8} | {'para@3':>6} "
          f"{'kw@3':>6} {'fr@3':>6} {'held@3':>6} {'heldMRR':>7} | {'p50 ms':>7} {'p95 ms':>7} {'chunks':>7}")
    for name, f, extra in rows:
        a = f["all"]
        print(f"{name:<24} {a['hit@1']:>6.3f} {a['hit@3']:>6.3f} {a['mrr@10']:>7.3f} {a['ndcg@10']:>8.3f} | "
              f"{f['paraphrased']['hit@3']:>6.3f} {f['keyword']['hit@3']:>6.3f} "
              f"{f.get('lang:fr', {'hit@3': float('nan')})['hit@3']:>6.3f} {f['held-out']['hit@3']:>6.3f} "
              f"{f['held-out']['mrr@10']:>7.3f} | {extra.get('p50', float('nan')):>7.1f} "
              f"{extra.get('p95', float('nan')):>7.1f} {extra.get('chunks', 0):>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None, help="the corpus's documents folder")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--systems", default="ours,recipe,langchain,llamaindex")
    parser.add_argument("--data-dir", type=Path, help="keep the knowledge base here between runs")
    parser.add_argument("--tenant", default="retrieval", help="the knowledge base's tenant (default: retrieval)")
    parser.add_argument("--sweep", action="store_true", help="also ours under each candidate search setting")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    from ingestion_pipeline.documents.search_eval import load_questions

    globals()["TENANT"] = args.tenant
    questions = load_questions(args.questions)
    files = knowledge_base_files(args.corpus or default_corpus(), questions)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    from ingestion_pipeline.cli.bootstrap import bootstrap

    print(f"{len(questions)} questions ({sum(q.kind == 'paraphrased' for q in questions)} paraphrased, "
          f"{sum(q.kind == 'keyword' for q in questions)} keyword; {sum(q.language == 'fr' for q in questions)} "
          f"French; {sum(q.held_out for q in questions)} held out) over {len(files)} documents")
    rows, everything = [], {}
    with knowledge_base_folder(args.data_dir) as work:
        ctx = bootstrap()
        if "ours" in systems:
            ingested = ingest_ours(ctx, files)
            print(f"ours: {ingested['documents']} documents, {ingested['chunks']} chunks, "
                  f"{ingested['failed']} failed, ingested in {ingested['ingest_s']:.0f} s")
            passages, search_ms, total_ms = ask_ours(ctx, questions)
            figures = evaluate(questions, passages)
            extra = {"p50": p(search_ms, 0.5), "p95": p(search_ms, 0.95), "chunks": ingested["chunks"],
                     "with_query_embedding_p50": p(total_ms, 0.5), "with_query_embedding_p95": p(total_ms, 0.95)}
            rows.append(("ours", figures, extra))
            everything["ours"] = {**figures, **extra}
            if args.sweep:
                from ingestion_pipeline.documents.search import sweep_settings

                for label, setting in sweep_settings():
                    passages, search_ms, _ = ask_ours(ctx, questions, setting)
                    f = evaluate(questions, passages)
                    e = {"p50": p(search_ms, 0.5), "p95": p(search_ms, 0.95), "chunks": ingested["chunks"]}
                    rows.append((f"  {label}", f, e))
                    everything[f"ours {label}"] = {**f, **e}
        if "recipe" in systems:
            passages, n, ms = recipe(ctx, files, questions, work)
            f = evaluate(questions, passages)
            rows.append(("recipe (1000/200, cos)", f, {"p50": p(ms, 0.5), "p95": p(ms, 0.95), "chunks": n}))
            everything["recipe"] = f
        for system in ("langchain", "llamaindex"):
            if system in systems:
                got = peer(system, model_folder(ctx), files)
                if got:
                    passages, n, ms = got
                    f = evaluate(questions, passages)
                    rows.append((system, f, {"p50": p(ms, 0.5), "p95": p(ms, 0.95), "chunks": n}))
                    everything[system] = f
        print_table(rows)
        if "ours" in everything:
            e = everything["ours"]
            print(f"\nours, with the query's embedding: p50 {e['with_query_embedding_p50']:.1f} ms, "
                  f"p95 {e['with_query_embedding_p95']:.1f} ms; misses at 3: {', '.join(e['misses']) or 'none'}")
        if args.json:
            args.json.write_text(json.dumps(everything, indent=1))
        ctx.db.close()


if __name__ == "__main__":
    main()
