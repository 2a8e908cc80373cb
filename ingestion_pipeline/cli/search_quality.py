"""`search-eval`: a question set asked of a tenant's knowledge base, and how often the answer comes back."""

from __future__ import annotations

import argparse
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, print_rows


def cmd_search_eval(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents.search import hybrid_search
    from ingestion_pipeline.documents.search_eval import answer_rank, interval, load_questions, report

    questions = load_questions(Path(args.questions))
    if not questions:
        raise ValueError(f"{args.questions} holds no questions")
    ranks: dict[str, int | None] = {}
    with bootstrap() as ctx:
        embedders = ctx.query_embedders
        vectors, tokens = embedders.embedder.embed_with_tokens([q.question for q in questions])
        with ctx.db.connection() as conn:
            for q, vector, query_tokens in zip(questions, vectors, tokens, strict=True):
                hits = hybrid_search(conn, tenant_id=args.tenant, query=q.question, query_vector=vector, k=args.k,
                                     model=embedders.model, other_models=embedders.for_query(q.question),
                                     query_tokens=query_tokens)
                ranks[q.id] = answer_rank([h.text for h in hits], q.answer)
    groups = report(questions, ranks)
    groups["held-out"] = report([q for q in questions if q.held_out], ranks)["all"]
    members = {"all": questions, "held-out": [q for q in questions if q.held_out]}
    rows = []
    for name, figures in groups.items():
        asked = members.get(name) or [q for q in questions if name in (q.kind, f"lang:{q.language}")]
        # the bootstrap 95 % interval of hit@3: how far one question more or less moves the figure
        low, high = interval([ranks[q.id] for q in asked], "hit@3")
        rows.append({"group": name, **figures.as_dict(), "hit@3 95%": f"{low:.2f}-{high:.2f}"})
    missed = sorted(q.id for q in questions if ranks[q.id] is None or ranks[q.id] > 3)
    rows.append({"group": "missed at 3", "questions": len(missed), "ids": missed})
    print_rows(args, rows, ["group", "questions", "hit@1", "hit@3", "hit@3 95%", "mrr@10", "ndcg@10"])
    return 0


def register(sub) -> None:
    p = sub.add_parser("search-eval", help="ask a question set (JSON Lines: id, document, kind, language, question, "
                                           "answer) of a tenant's documents: hit@1, hit@3, MRR@10, nDCG@10")
    p.add_argument("questions", metavar="QUESTIONS", help="e.g. benchmarks/retrieval/questions.jsonl (kinds: natural, "
                                                          "lookup, echo)")
    p.add_argument("--tenant", required=True)
    p.add_argument("-k", type=int, default=10, help="passages read per question (default 10)")
    add_json_flag(p)
    p.set_defaults(func=cmd_search_eval)
