"""A retrieval test: a question set asked of the tenant's knowledge base as the search route asks it, with hit@k,
MRR and each miss with what came back instead (the web app's retrieval-test page; ``search-eval`` on the CLI)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.api.routes.documents import hit_out
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.documents.search_eval import (
    QuestionSetError,
    answer_rank,
    interval,
    parse_questions,
    report,
)

router = APIRouter(prefix="/v1", tags=["search"])
# each question is a search: a set is bounded like any request (a minute or so of the tenant's search share)
MAX_QUESTIONS = 500
MISSED_HITS_SHOWN = 3
MAX_QUESTION_CHARS = 1000  # GET /v1/search's bound on q


class EvaluationIn(BaseModel):
    questions: str = Field(max_length=1_000_000, description="the search-eval format: JSON Lines of id, document, "
                                                             "kind, language, question, answer")
    k: int = Field(10, ge=1, le=50, description="hits asked per question")


class EvaluationOut(BaseModel):
    questions: int
    seconds: float
    groups: list[dict[str, Any]] = Field(description="all, held-out, per kind and per language: hit@1, hit@3 "
                                                     "with its bootstrap 95 % interval, hit@10, MRR@10")
    misses: list[dict[str, Any]] = Field(description="questions whose answer is not in the top 3, with the hits "
                                                     "that came back instead")


@router.post("/search/evaluations", response_model=EvaluationOut, responses={
    400: {"description": "not a question set (the message names the line), or more than MAX_QUESTIONS"}})
async def evaluate(body: EvaluationIn, request: Request, who: Caller, services: Services) -> dict:
    """Ask every question of the set as one search each, under the tenant's search share (one of its slots for the
    whole set), and judge each answer as ``search-eval`` does."""
    try:
        questions = parse_questions(body.questions.splitlines(), "the question set")
    except QuestionSetError as exc:
        raise ApiError(400, "invalid_question_set", str(exc)) from exc
    if not questions:
        raise ApiError(400, "invalid_question_set", "the question set holds no question")
    if len(questions) > MAX_QUESTIONS:
        raise ApiError(400, "invalid_question_set", f"{len(questions)} questions: at most {MAX_QUESTIONS} a test")
    too_long = next((q.id for q in questions if len(q.question) > MAX_QUESTION_CHARS), None)
    if too_long is not None:  # as long as a search's own query may be
        raise ApiError(400, "invalid_question_set", f"question {too_long} is over {MAX_QUESTION_CHARS} characters")
    slots = request.app.state.search_slots
    started = time.perf_counter()

    def run() -> tuple[dict[str, int | None], dict[str, list]]:
        ranks: dict[str, int | None] = {}
        shown: dict[str, list] = {}
        with slots.hold(who.tenant_id):
            embedders = services.query_embedders
            vectors, tokens = embedders.embedder.embed_with_tokens([q.question for q in questions])
            with services.db.connection() as conn:
                for q, vector, query_tokens in zip(questions, vectors, tokens, strict=True):
                    hits = hybrid_search(conn, tenant_id=who.tenant_id, query=q.question, query_vector=vector,
                                         k=body.k, model=embedders.model, other_models=embedders.for_query(q.question),
                                         query_tokens=query_tokens)
                    ranks[q.id] = answer_rank([h.text for h in hits], q.answer)
                    shown[q.id] = hits[:MISSED_HITS_SHOWN]
        return ranks, shown

    ranks, shown = await run_in_threadpool(run)
    groups = report(questions, ranks)
    held_out = [q for q in questions if q.held_out]
    if held_out:
        groups["held-out"] = report(held_out, ranks)["all"]
    rows = []
    for name, figures in groups.items():
        asked = held_out if name == "held-out" else [
            q for q in questions if name == "all" or name in (q.kind, f"lang:{q.language}")]
        low, high = interval([ranks[q.id] for q in asked], "hit@3")
        within_10 = sum(ranks[q.id] is not None and ranks[q.id] <= 10 for q in asked) / len(asked)
        rows.append({"group": name, **figures.as_dict(), "hit@3 95%": f"{low:.2f}-{high:.2f}",
                     "hit@10": round(within_10, 3)})
    misses = [{"id": q.id, "kind": q.kind, "document": q.document, "question": q.question, "answer": q.answer,
               "rank": ranks[q.id], "got": [hit_out(h) for h in shown[q.id]]}
              for q in questions if ranks[q.id] is None or ranks[q.id] > 3]
    return {"questions": len(questions), "seconds": round(time.perf_counter() - started, 2), "groups": rows,
            "misses": misses}
