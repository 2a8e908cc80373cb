"""Retrieval quality on the project's question sets: ours beside ours by vectors only, the default recipe and the
peers' default retrievers, all on the same model, in one run, per kind of question, with intervals.

The question set (benchmarks/retrieval/questions.jsonl) holds questions written from the meaning of passages by
someone who saw neither the search code nor its results, over every content-rich document of the sample corpus:
``natural`` (the asker's own words), ``lookup`` (a term, name or figure the asker knows) and French ones; each kind's
overlap with its answers is held under a bound by the question set's test (``documents/question_overlap.py``).
The questions written before them (benchmarks/retrieval/echo.jsonl, kind ``echo``) repeat much of their answers'
wording: reported on their own, never used to choose a setting. Each answer is a span of its document's text,
judged by ``documents/search_eval.py`` on the passages each system returns (whatever its chunks). Every other
question is held out: settings are chosen on the tuning half's natural questions (``--sweep``), lookup must not
lose, and the held-out half says whether the choice generalises.

Systems:
- ours: ``submit`` + ``process`` of the documents (as ``ingest``), then ``search -k 10`` for each question;
  ``ours, vectors only``: the same knowledge base ranked by its vector arm alone;
- recipe: the default twenty-line recipe: the documents' plain text (the same extraction as ours), 1,000-character
  windows overlapping by 200, the same MiniLM, exact cosine;
- langchain, llamaindex: their getting-started retrievers (benchmarks/peer_retrieval.py, in .venv-peers:
  ``make bench-peers`` installs it); LlamaIndex with chunks that fit the model.

    .venv/bin/python benchmarks/retrieval_quality.py [--systems ours,recipe,langchain,llamaindex]
        [--data-dir DIR] [--sweep] [--json FILE]

``--data-dir`` keeps the knowledge base (and the recipe's vectors) between runs: unchanged files are skipped.
Prints hit@1, hit@3 and MRR@10 with bootstrap 95 % intervals per kind, the held-out half, each system's
difference from the recipe on natural questions (paired), and search latency (p50/p95, warm: each question asked
twice, the second timed).
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
from dataclasses import replace
from pathlib import Path

from ingestion_pipeline.documents.search_eval import CHOOSING_KINDS

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "benchmarks" / "retrieval" / "questions.jsonl"
ECHO_QUESTIONS = ROOT / "benchmarks" / "retrieval" / "echo.jsonl"
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
                              " AND file_id = (SELECT max(file_id) FROM ingestion_runs r2 WHERE r2.doc_id = "
                              "ingestion_runs.doc_id)", (TENANT,)).fetchone()["n"]
        sizes = conn.execute(
            """SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('chunk_embeddings')) AS vectors,
                      pg_total_relation_size('chunk_token_vectors') AS tokens,
                      (SELECT avg(octet_length(tokens)) FROM chunk_token_vectors WHERE tenant_id = %s) AS per_chunk""",
            (TENANT,)).fetchone()
    return {"documents": row["documents"], "chunks": int(row["chunks"]), "failed": failed,
            "ingest_s": time.perf_counter() - start, "vector_bytes": int(sizes["vectors"] or 0),
            "token_bytes": sizes["tokens"], "token_bytes_per_chunk": float(sizes["per_chunk"] or 0)}


def ask_ours(ctx, questions, settings=None, *, timed: bool = True,
             embedded: dict | None = None) -> tuple[dict[str, list[str]], list[float], list[float]]:
    """Each question's top-10 passages; search milliseconds (warm) without and with the query's embedding (its
    vector and token vectors). ``timed`` False: one untimed pass (a sweep's settings); ``embedded``: the questions'
    embeddings kept between calls."""
    from ingestion_pipeline.documents.search import hybrid_search

    model = ctx.embedder.info.name
    embedders = ctx.query_embedders  # a knowledge base in the middle of a model change: every model's vectors
    embedded = {} if embedded is None else embedded
    for q in questions:
        if q.id not in embedded:
            embedded[q.id] = ctx.embedder.embed_query(q.question)
    passages, search_ms, total_ms = {}, [], []
    with ctx.db.connection() as conn:
        for timing in ((False, True) if timed else (False,)):
            for q in questions:
                start = time.perf_counter()
                vector, tokens = ctx.embedder.embed_query(q.question) if timing else embedded[q.id]
                ready = time.perf_counter()
                hits = hybrid_search(conn, tenant_id=TENANT, query=q.question, query_vector=vector, model=model,
                                     k=10, other_models=embedders.for_query(q.question), query_tokens=tokens,
                                     **({"settings": settings} if settings else {}))
                done = time.perf_counter()
                if timing:
                    search_ms.append((done - ready) * 1000)
                    total_ms.append((done - start) * 1000)
                passages[q.id] = [h.text for h in hits]
    return passages, search_ms, total_ms


# -- the default recipe -------------------------------------------------------------------------------
def recipe(ctx, files: list[Path], questions, cache: Path) -> tuple[dict[str, list[str]], int, list[float]]:
    """Plain text, 1,000-character windows with 200 overlap, exact cosine over normalised vectors."""
    import numpy as np

    from ingestion_pipeline.documents.extraction import extract

    windows: list[str] = []
    blocks = []
    for path in files:  # each file's vectors kept by its windows' digest: a file added embeds that file only
        text = "\n".join(el.text for el in extract(path, path.suffix, ctx.settings.limits).elements)
        own = [text[i:i + 1000] for i in range(0, max(len(text) - 200, 1), 800)]
        stored = cache / f"recipe-{hashlib.sha256(chr(30).join(own).encode()).hexdigest()[:16]}.npy"
        if not stored.exists():
            np.save(stored, np.asarray(ctx.embedder.embed(own), dtype=np.float32))
        blocks.append(np.load(stored))
        windows += own
    matrix = np.concatenate(blocks)
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
def peer(system: str, model: str, files: list[Path], questions,
         cache: Path) -> tuple[dict[str, list[str]], int, list[float]] | None:
    """The peer's passages for each question, kept in ``cache`` by what decides them (the files, the questions,
    the peer's script): a peer embeds every chunk itself, minutes a run."""
    if not PEERS_PYTHON.exists():
        print(f"{system}: skipped (no .venv-peers: `make bench-peers` installs the peers)")
        return None
    key = hashlib.sha256()
    script = (ROOT / "benchmarks" / "peer_retrieval.py").read_text()
    for part in [system, script, *(q.id + q.question for q in questions)]:
        key.update(part.encode())
    for path in files:
        key.update(hashlib.sha256(path.read_bytes()).digest())
    kept = cache / f"{system}-{key.hexdigest()[:16]}.json"
    if kept.exists():
        out = json.loads(kept.read_text())
        return out["passages"], out["chunks"], out["query_ms"]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as asked:
        asked.writelines(json.dumps({"id": q.id, "question": q.question}) + "\n" for q in questions)
        asked.flush()
        result = subprocess.run(
            [str(PEERS_PYTHON), str(ROOT / "benchmarks" / "peer_retrieval.py"), system, "--model", model,
             "--questions", asked.name, *map(str, files)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"{system}: failed\n{result.stderr[-2000:]}")
        return None
    out = json.loads(result.stdout.strip().splitlines()[-1])
    kept.write_text(json.dumps(out))
    return out["passages"], out["chunks"], out["query_ms"]


# -- figures ------------------------------------------------------------------------------------------
GROUPS = ("natural", "lookup", "lang:fr", "choosing", "held-out natural", "echo")


def group_of(questions, name: str) -> list:
    """The questions of a group: a kind, a language (``lang:fr``), every natural and lookup question
    (``choosing``), a half of the natural ones (``held-out natural``, ``tuning natural``)."""
    if name.startswith("lang:"):
        return [q for q in questions if q.language == name[5:] and q.kind != "echo"]
    if name == "choosing":
        return [q for q in questions if q.kind in CHOOSING_KINDS]
    if name.endswith(" natural"):
        return [q for q in questions if q.kind == "natural" and q.held_out == name.startswith("held-out")]
    if name.startswith("tuning "):
        return [q for q in questions if q.kind == name[7:] and not q.held_out]
    return [q for q in questions if q.kind == name]


def evaluate(questions, passages: dict[str, list[str]]) -> dict:
    """Per group: hit@1, hit@3, MRR@10 and nDCG@10 with the 95 % intervals of the first three; each question's
    rank (``ranks``, for paired comparisons); the choosing kinds' misses at 3."""
    from ingestion_pipeline.documents.search_eval import answer_rank, figures, interval

    ranks = {q.id: answer_rank(passages.get(q.id, []), q.answer) for q in questions}
    out: dict = {"ranks": ranks}
    for name in (*GROUPS, "tuning natural", "tuning lookup"):
        group = [ranks[q.id] for q in group_of(questions, name)]
        if group:
            out[name] = {**figures(group).as_dict(),
                         **{f"{m} ci": interval(group, m) for m in ("hit@1", "hit@3", "mrr@10")}}
    out["misses"] = sorted(q.id for q in group_of(questions, "choosing") if ranks[q.id] is None or ranks[q.id] > 3)
    return out


def p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _cell(f: dict, metric: str) -> str:
    low, high = f[f"{metric} ci"]
    return f"{f[metric]:.3f} [{low:.2f}-{high:.2f}]"


def print_table(rows: list[tuple[str, dict, dict]], groups=GROUPS) -> None:
    """Each group's figures, a system a row, with intervals; then each system's latency and chunks."""
    for group in groups:
        present = [(name, f[group]) for name, f, _ in rows if group in f]
        if not present:
            continue
        n = present[0][1]["questions"]
        print(f"\n{group} ({n} questions)\n{'system':<34} {'hit@1':>19} {'hit@3':>19} {'MRR@10':>19}")
        for name, f in present:
            print(f"{name:<34} {_cell(f, 'hit@1'):>19} {_cell(f, 'hit@3'):>19} {_cell(f, 'mrr@10'):>19}")
    print(f"\n{'system':<34} {'p50 ms':>7} {'p95 ms':>7} {'chunks':>7}")
    for name, _, extra in rows:
        print(f"{name:<34} {extra.get('p50', float('nan')):>7.1f} {extra.get('p95', float('nan')):>7.1f} "
              f"{extra.get('chunks', 0):>7}")


def print_against(rows: list[tuple[str, dict, dict]], questions, baseline: str) -> None:
    """Each system's difference from ``baseline`` on the natural and lookup questions, paired, with its interval."""
    from ingestion_pipeline.documents.search_eval import paired_difference

    base = next((f for name, f, _ in rows if name == baseline), None)
    if base is None:
        return
    print(f"\nagainst {baseline}, paired (difference [95 % interval]):")
    for kind in ("natural", "lookup"):
        ids = [q.id for q in group_of(questions, kind)]
        for name, f, _ in rows:
            if name == baseline or not ids:
                continue
            cells = []
            for metric in ("hit@1", "hit@3", "mrr@10"):
                d, low, high = paired_difference([f["ranks"][i] for i in ids], [base["ranks"][i] for i in ids], metric)
                cells.append(f"{metric} {d:+.3f} [{low:+.2f} {high:+.2f}]")
            print(f"  {kind:<8} {name:<32} " + "  ".join(cells))


def load_sets(questions_path: Path, echo_path: Path | None) -> list:
    from ingestion_pipeline.documents.search_eval import load_questions

    questions = load_questions(questions_path)
    if echo_path is not None and echo_path.exists():
        questions += load_questions(echo_path)
    return questions


def describe(questions) -> str:
    from ingestion_pipeline.documents.question_overlap import kind_overlaps

    counts: dict[str, int] = {}
    for q in questions:
        counts[q.kind] = counts.get(q.kind, 0) + 1
    overlaps = kind_overlaps(questions)
    kinds = ", ".join(f"{n} {kind} (overlap {overlaps[kind]:.2f})" for kind, n in sorted(counts.items()))
    french = sum(q.language == "fr" and q.kind != "echo" for q in questions)
    held = sum(q.held_out and q.kind != "echo" for q in questions)
    return f"{len(questions)} questions: {kinds}; {french} French, {held} held out (echo aside)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None, help="the corpus's documents folder")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--echo", default=str(ECHO_QUESTIONS), help="the echo questions ('' for none)")
    parser.add_argument("--systems", default="ours,recipe,langchain,llamaindex")
    parser.add_argument("--data-dir", type=Path, help="keep the knowledge base here between runs")
    parser.add_argument("--tenant", default="retrieval", help="the knowledge base's tenant (default: retrieval)")
    parser.add_argument("--sweep", action="store_true", help="also ours under each candidate search setting")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    globals()["TENANT"] = args.tenant
    questions = load_sets(args.questions, Path(args.echo) if args.echo.strip() else None)
    files = knowledge_base_files(args.corpus or default_corpus(), questions)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    from ingestion_pipeline.cli.bootstrap import bootstrap

    print(f"{describe(questions)}; over {len(files)} documents")
    rows, everything = [], {}
    with knowledge_base_folder(args.data_dir) as work:
        ctx = bootstrap()
        if "ours" in systems:
            from ingestion_pipeline.documents.search import DEFAULT_SETTINGS, sweep_settings

            ingested = ingest_ours(ctx, files)
            print(f"ours: {ingested['documents']} documents, {ingested['chunks']} chunks, "
                  f"{ingested['failed']} failed, ingested in {ingested['ingest_s']:.0f} s; vectors "
                  f"{ingested['vector_bytes'] / 1e6:.1f} MB, token vectors {ingested['token_bytes'] / 1e6:.1f} MB "
                  f"({ingested['token_bytes_per_chunk'] / 1000:.1f} KB a chunk)")
            vectors_only = replace(DEFAULT_SETTINGS, fusion="rrf", text_weight=0.0, plain_text_weight=0.0)
            variants = [("ours", DEFAULT_SETTINGS), ("ours, vectors only", vectors_only)]
            if args.sweep:
                variants += [(f"  {label}", setting) for label, setting in sweep_settings()]
            embedded: dict = {}
            for number, (label, setting) in enumerate(variants):
                # the sweep's settings are compared on quality alone: one untimed pass each
                passages, search_ms, total_ms = ask_ours(ctx, questions, setting, timed=number < 2, embedded=embedded)
                extra = {"p50": p(search_ms, 0.5), "p95": p(search_ms, 0.95), "chunks": ingested["chunks"],
                         "with_query_embedding_p95": p(total_ms, 0.95)}
                rows.append((label, evaluate(questions, passages), extra))
                everything[label.strip()] = {**rows[-1][1], **extra}
        if "recipe" in systems:
            passages, n, ms = recipe(ctx, files, questions, work)
            rows.append(("recipe (1000/200 chars, cos)", evaluate(questions, passages),
                         {"p50": p(ms, 0.5), "p95": p(ms, 0.95), "chunks": n}))
            everything["recipe"] = rows[-1][1]
        for system in ("langchain", "llamaindex"):
            if system in systems:
                got = peer(system, model_folder(ctx), files, questions, work)
                if got:
                    passages, n, ms = got
                    rows.append((system, evaluate(questions, passages),
                                 {"p50": p(ms, 0.5), "p95": p(ms, 0.95), "chunks": n}))
                    everything[system] = rows[-1][1]
        if args.sweep:
            print_table(rows, ("tuning natural", "tuning lookup"))
        print_table(rows)
        print_against(rows, questions, "recipe (1000/200 chars, cos)")
        if "ours" in everything:
            e = everything["ours"]
            print(f"\nours, with the query's embedding: p95 {e['with_query_embedding_p95']:.1f} ms; {len(e['misses'])} "
                  f"natural and lookup questions missed at 3 (--json lists them)")
        if args.json:
            args.json.write_text(json.dumps(everything, indent=1))
        ctx.db.close()


if __name__ == "__main__":
    main()
