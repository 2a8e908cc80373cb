"""A big scanned document and its revision: what a revised page costs against reading the whole document again.

OCR is the most expensive thing done to a page (Tesseract, 0.2-2 s a page on one core). A revised scan whose
other pages are unchanged should cost its changed pages, not the document. This writes an N-page scanned PDF
(pages of generated prose rendered at 200 dpi, no text layer), then in a throwaway data folder (its own
embedded Postgres) runs `ingestion-pipeline ingest`:

1. the first version (`--key manual.pdf`): every page read by OCR;
2. a revision with M pages changed, under the same key: only the changed pages read, the others' text reused;
3. the same revision under another key (a new document, nothing to reuse): what the revision cost before
   pages were reused.

Prints for each the command's wall time, the extract step's time (from the ledger's timings), pages read by
OCR and pages reused, and the revision's time as a share of the first ingest.

    .venv/bin/python benchmarks/big_documents.py [--pages 60] [--changed 2]
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare_peers import prepare_model, scratch_environment  # noqa: E402

WORDS = ("harbour board ferry schedule winter channel dredging budget tide water crown council minutes vote "
         "master pilot cargo quay lock gate season report engineer survey depth storm repair contract levy "
         "lighthouse beacon berth tonnage fishing fleet license inspection chart buoy warehouse crane")


def page_lines(page: int, revision: int = 0) -> list[str]:
    """Twenty lines of generated prose for a page: the same for the same (page, revision)."""
    rng = random.Random(page * 1000 + revision)
    lines = [f"Section {page}. Harbour operations, revision {revision}"]
    for _ in range(19):
        lines.append(" ".join(rng.choice(WORDS.split()) for _ in range(9)).capitalize() + ".")
    return lines


def ingest(env: dict, path: Path, key: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "ingest", "--tenant", "bench",
                           "--key", key, str(path)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ingest of {path.name} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - start


def last_file(database_url: str) -> dict:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT status, error, stats FROM ingestion_runs ORDER BY run_id DESC LIMIT 1").fetchone()


def measure(work: Path, env: dict, pages: int, changed_count: int) -> list[tuple]:
    """The three ingests in the throwaway data folder: (label, wall s, extract s, OCR read, reused) each."""
    from ingestion_pipeline.core.db import resolve_database_url
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages

    database_url = resolve_database_url(allow_embedded=True)
    env["DATABASE_URL"] = database_url
    subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "db", "migrate"], env=env, check=True,
                   capture_output=True)
    prepare_model(env)
    changed = sorted(random.Random(7).sample(range(1, pages + 1), changed_count))
    first = write_scanned_pages(work / "manual-v1.pdf", [page_lines(p) for p in range(1, pages + 1)])
    revised = write_scanned_pages(work / "manual-v2.pdf", [page_lines(p, 1 if p in changed else 0)
                                                           for p in range(1, pages + 1)])
    print(f"a {pages}-page scanned PDF ({first.stat().st_size / 1e6:.1f} MB); the revision changes page(s) "
          f"{', '.join(map(str, changed))}", flush=True)

    rows = []
    for label, path, key in (("first version", first, "manual.pdf"),
                             ("revision, same key (pages reused)", revised, "manual.pdf"),
                             ("revision as a new document (nothing reused)", revised, "manual-copy.pdf")):
        wall = ingest(env, path, key)
        file = last_file(database_url)
        if file["status"] != "succeeded":
            sys.exit(f"{label}: {file['status']}: {file['error']}")
        stats = file["stats"]
        rows.append((label, wall, stats["timings_ms"]["extract"] / 1000, stats.get("ocr_pages_read", 0),
                     stats.get("ocr_pages_reused", 0)))
        print(f"  {label}: {wall:.1f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--changed", type=int, default=2)
    args = parser.parse_args()

    work, env = scratch_environment("bench-big-")
    try:
        rows = measure(work, env, args.pages, args.changed)
    finally:  # the throwaway data folder's own Postgres, then the folder
        from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

        stop_embedded_postgres(work / "data" / "pgdata")
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'':45} {'wall s':>8} {'extract s':>10} {'OCR read':>9} {'reused':>7}")
    for label, wall, extract_s, read, reused in rows:
        print(f"{label:45} {wall:8.1f} {extract_s:10.1f} {read:9} {reused:7}")
    first_wall = rows[0][1]
    print(f"\nrevision with pages reused: {rows[1][1] / first_wall:.0%} of the first ingest's wall time "
          f"(without reuse: {rows[2][1] / first_wall:.0%}); extract step {rows[1][2] / rows[0][2]:.0%} "
          f"(without reuse: {rows[2][2] / rows[0][2]:.0%})")


if __name__ == "__main__":
    main()
