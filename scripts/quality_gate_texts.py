"""Write ``ingestion_pipeline/documents/quality_gate.json``: the texts a reduced-precision model is judged on.

Chunks are the pipeline's own (extracted and chunked as it does) from a folder of real documents, spread
evenly over each document so that every one contributes; the queries are written by hand, one or more per
document, as a person searching the corpus would ask. Run once when the set should change:

    .venv/bin/python scripts/quality_gate_texts.py --corpus DIR [--chunks 400]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.documents.chunking import chunk_elements, effective_budgets
from ingestion_pipeline.documents.embedding import default_model_path
from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.quality_gate import GATE_FILE
from ingestion_pipeline.documents.tokens import load_token_counter

QUERIES = [
    "Everyone is born free and equal in dignity and rights",
    "Can programming be liberated from the von Neumann style?",
    "functional programming and an algebra of programs",
    "Pierre Bezukhov inherits his father's fortune",
    "Napoleon's army retreats from Moscow in winter",
    "Prince Andrei wounded at the battle of Austerlitz",
    "deep learning toolkit for document image layout analysis",
    "layout detection models trained on PubLayNet",
    "Iwan Roberts goals for Norwich City",
    "annual report risk factors that could affect our business",
    "net revenue and operating income for the fiscal year",
    "chemical composition of chromium molybdenum structural steel",
    "résumé des logs de requêtes OLAP",
    "stats and abilities of the Archdemon creature",
    "duties of a Chapter 13 standing trustee",
    "how many blankets and laptops were delivered in January",
    "egg shell as a corrosion inhibitor for stainless steel in sulfuric acid",
    "dense passage retrieval for open-domain question answering",
    "삼성카드 포인트 적립 제외 대상",
    "where do good new ideas come from",
    "Reliance integrated annual report 2021-22 sustainable value creation",
    "how to install the package with pip",
    "example of a table with incomplete rows",
    "text in the header and the footer of each page",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a folder of documents (PDF, DOCX, HTML, Markdown, TXT)")
    parser.add_argument("--chunks", type=int, default=600, help="judged and calibrating, together")
    args = parser.parse_args()
    settings = load_settings()
    counter = load_token_counter(default_model_path())
    target, hard_max = effective_budgets(settings.chunk.target_tokens, settings.chunk.max_tokens, counter)
    per_document: dict[str, list[str]] = {}
    for path in sorted(Path(args.corpus).iterdir()):
        try:
            document = extract(path, path.suffix)
        except Exception as exc:  # the corpus holds broken files on purpose: they have no chunks
            print(f"skipped {path.name}: {type(exc).__name__}")
            continue
        texts = [c.text for c in chunk_elements(document.elements, counter, target=target, hard_max=hard_max)]
        texts = [t for t in texts if len(t.split()) >= 24]  # a passage of 12 words from half way in must exist
        if texts:
            per_document[path.name] = texts
    quotas = dict.fromkeys(per_document, 0)  # one chunk at a time to each document that has more left
    while sum(quotas.values()) < min(args.chunks, sum(map(len, per_document.values()))):
        for name, texts in per_document.items():
            if quotas[name] < len(texts) and sum(quotas.values()) < args.chunks:
                quotas[name] += 1
    chosen: list[str] = []
    for name, texts in per_document.items():  # evenly spread over each document
        chosen += [texts[i * len(texts) // quotas[name]] for i in range(quotas[name])]
    # every third chunk calibrates NNCF's int8 model; the others judge it (no chunk does both)
    calibration = chosen[2::3]
    chunks = [text for i, text in enumerate(chosen) if i % 3 != 2]
    GATE_FILE.write_text(json.dumps({"chunks": chunks, "queries": QUERIES, "calibration": calibration},
                                    ensure_ascii=False, indent=0) + "\n")
    print(f"{len(chunks)} chunks to judge and {len(calibration)} to calibrate, from {len(per_document)} "
          f"documents; {len(QUERIES)} queries -> {GATE_FILE}")


if __name__ == "__main__":
    main()
