"""Retrieval quality through a model change: before, while the re-index under the new model is half done, and
after, on the project's question set (benchmarks/retrieval/questions.jsonl) over the retrieval benchmark's
knowledge base.

The new model is benchmark-only unless ``--new-model`` names one, made offline from the packaged MiniLM (the
only model this machine has): ``--kind noisy`` (the default) adds Gaussian noise to every weight (``--noise``
times each tensor's standard deviation): another embedding space of about the same quality, the case a model
upgrade should be; ``--kind cut`` keeps only its first ``--layers`` layers: a weaker model. Rows:

- before: the old model serves every version;
- half, new host: half the versions re-indexed; a host running the new model searches each version through its
  own model's vectors (``documents/serving_models.py``);
- half, new host, blind: the same, but the query compared with the new model's vectors only (what search did
  before: the old versions drop out of the vector half);
- half, old host: a host still running the old model during a rolling deploy;
- after: every version under the new model.

    .venv/bin/python benchmarks/model_migration.py [--data-dir DIR] [--new-model PATH]
        [--kind noisy|cut] [--noise 0.1] [--layers 4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_quality as rq  # noqa: E402  (the knowledge base, its questions and figures)


def cut_model(source: str, folder: Path, layers: int) -> Path:
    """The model at ``source`` with only its first ``layers`` transformer layers (benchmark-only)."""
    from safetensors.torch import load_file, save_file

    out = folder / f"minilm-first-{layers}-layers"
    if out.exists():
        return out
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (out / "config.json").write_text(json.dumps(config, indent=1))
    weights = load_file(str(out / "model.safetensors"))
    kept = {k: v for k, v in weights.items()
            if ".layer." not in k or int(k.split(".layer.")[1].split(".")[0]) < layers}
    save_file(kept, str(out / "model.safetensors"))
    return out


def noisy_model(source: str, folder: Path, noise: float) -> Path:
    """The model at ``source`` with Gaussian noise of ``noise`` times each weight tensor's standard deviation
    added to it (benchmark-only; seed 0)."""
    import torch
    from safetensors.torch import load_file, save_file

    out = folder / f"minilm-noise-{noise:g}"
    if out.exists():
        return out
    shutil.copytree(source, out)
    generator = torch.Generator().manual_seed(0)
    weights = load_file(str(out / "model.safetensors"))
    noisy = {}
    for name, tensor in weights.items():
        if tensor.is_floating_point() and tensor.numel() > 1:
            tensor = tensor + torch.randn(tensor.shape, generator=generator) * tensor.std() * noise
        noisy[name] = tensor.contiguous()
    save_file(noisy, str(out / "model.safetensors"))
    return out


def reindex_share(ctx, new_ctx, every: int) -> tuple[int, float]:
    """Queue every ``every``-th stale version of the tenant for re-index under the new model and process it."""
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.documents import reindex

    with new_ctx.db.transaction() as conn:
        plan = reindex.find_versions(conn, new_ctx.fingerprint_for, tenant_id=rq.TENANT)
        plan.reindexable = plan.reindexable[::every]
        reindex.queue(conn, plan)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        process_queued(new_ctx, argparse.Namespace(json=True))
    return len(plan.reindexable), time.perf_counter() - start


def ask(ctx, questions, *, other_models: bool = True) -> tuple[dict[str, list[str]], list[float]]:
    """Each question's top-10 passages as a host running ``ctx``'s model answers it; search ms with the query's
    embeddings (every model's it needs), warm."""
    from ingestion_pipeline.documents.search import hybrid_search

    embedders = ctx.query_embedders
    passages, ms = {}, []
    with ctx.db.connection() as conn:
        for timed in (False, True):
            for q in questions:
                start = time.perf_counter()
                vector = embedders.embedder.embed([q.question])[0]
                hits = hybrid_search(conn, tenant_id=rq.TENANT, query=q.question, query_vector=vector,
                                     model=embedders.model, k=10,
                                     other_models=embedders.for_query(q.question) if other_models else None)
                if timed:
                    ms.append((time.perf_counter() - start) * 1000)
                passages[q.id] = [h.text for h in hits]
    return passages, ms


def progress(ctx, model: str) -> str:
    from ingestion_pipeline.documents.serving_models import migration_progress

    with ctx.db.connection() as conn:
        return migration_progress(conn, model, rq.TENANT).summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None, help="the corpus's documents folder")
    parser.add_argument("--data-dir", type=Path, help="keep the knowledge base here between runs")
    parser.add_argument("--new-model", type=Path, help="the model to migrate to (default: MiniLM cut, see --layers)")
    parser.add_argument("--kind", choices=("noisy", "cut"), default="noisy", help="the benchmark-only new model")
    parser.add_argument("--noise", type=float, default=0.1, help="--kind noisy: noise / weight std (default 0.1)")
    parser.add_argument("--layers", type=int, default=4, help="--kind cut: layers kept (default 4)")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    from ingestion_pipeline.documents.search_eval import load_questions

    questions = load_questions(rq.QUESTIONS)
    files = rq.knowledge_base_files(args.corpus or rq.default_corpus(), questions)
    from ingestion_pipeline import services
    from ingestion_pipeline.cli.bootstrap import Context, bootstrap

    rows = []
    with rq.knowledge_base_folder(args.data_dir) as work:
        ctx = bootstrap()
        ingested = rq.ingest_ours(ctx, files)
        print(f"{len(questions)} questions over {ingested['documents']} documents, {ingested['chunks']} chunks "
              f"(ingested in {ingested['ingest_s']:.0f} s)")
        if args.new_model:
            new_path, label = args.new_model, str(args.new_model)
        elif args.kind == "cut":
            new_path = cut_model(rq.model_folder(ctx), work, args.layers)
            label = f"{new_path.name} (benchmark-only: MiniLM's first {args.layers} layers)"
        else:
            new_path = noisy_model(rq.model_folder(ctx), work, args.noise)
            label = f"{new_path.name} (benchmark-only: MiniLM's weights + noise of {args.noise:g} x their std)"
        new_ctx = Context(ctx.url, ctx.settings,
                          embedder=services.embedder(ctx.settings, model_path=str(new_path), database_url=ctx.url))
        old_name, new_name = ctx.embedder.info.name, new_ctx.embedder.info.name
        probe = ["the leave policy", "quarterly revenue grew", "la base de données multidimensionnelle"]
        agreement = float((ctx.embedder.embed(probe) * new_ctx.embedder.embed(probe)).sum(axis=1).mean())
        print(f"old model {old_name}; new model {label}; mean cosine of their vectors of 3 texts {agreement:.3f}")

        def measure(name: str, host, **kw) -> None:
            passages, ms = ask(host, questions, **kw)
            rows.append((name, rq.evaluate(questions, passages), {"p50": rq.p(ms, 0.5), "p95": rq.p(ms, 0.95),
                                                                   "chunks": ingested["chunks"]}))

        measure("before (old model)", ctx)
        n, seconds = reindex_share(ctx, new_ctx, every=2)
        print(f"re-indexed {n} version(s) under the new model in {seconds:.0f} s: {progress(ctx, new_name)}")
        measure("half, new host", new_ctx)
        measure("half, new host, blind", new_ctx, other_models=False)
        measure("half, old host", ctx)
        n, seconds = reindex_share(ctx, new_ctx, every=1)
        print(f"re-indexed {n} more in {seconds:.0f} s: {progress(ctx, new_name)}")
        measure("after (new model)", new_ctx)
        rq.print_table(rows)
        print("\np50/p95: search with the query's embedding under every model it needs (warm); blind: the query "
              "compared with the new model's vectors only")
        new_ctx.db.close()
        ctx.db.close()


if __name__ == "__main__":
    main()
