"""Hostile inputs through the real `ingestion-pipeline` command, at full size, with the default limits: what each
ends as, its error code, how long it took and the peak memory of the processes involved.

Each case runs the command as a child process in a throwaway database and a fresh data folder; the peak RSS is
the largest resident set of the command and the processes it waited for (its extraction workers), from
``wait4`` (the embedded Postgres is a separate server and not counted). The suite in
``ingestion_pipeline_tests/hostile/`` holds every case at a smaller size; this prints the figures.

    .venv/bin/python benchmarks/hostile_inputs.py [--only docx-text-bomb,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throwaway_database import throwaway_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLI = [str(Path(sys.executable).parent / "ingestion-pipeline")]


@dataclass
class Case:
    name: str
    make: Callable[[Path], list[Path]]  # files in the work folder
    commands: Callable[[list[Path]], list[list[str]]]  # run one after the other
    table: str  # where the outcome is recorded


def _docx(work: Path) -> list[Path]:
    from ingestion_pipeline.samples.text_bombs import docx_with_text

    return [docx_with_text(work / "text-bomb.docx", 30_000_000)]


def _xlsx(work: Path) -> list[Path]:
    from ingestion_pipeline.samples.text_bombs import xlsx_with_text

    return [xlsx_with_text(work / "text-bomb.xlsx", 25_000_000)]


def _giant_word(work: Path) -> list[Path]:
    path = work / "giant-word.txt"
    path.write_text("".join(chr(97 + i % 26) for i in range(2_000_000)))
    return [path]


def _token_bomb(work: Path) -> list[Path]:
    """19 M characters under the text cap (20 M) that the tokenizer counts one token each: over the 10 M-token
    cap, refused once the count passes it (before: after chunking all of it)."""
    path = work / "token-bomb.txt"
    path.write_text("x," * 9_500_000)
    return [path]


def _deep_json(work: Path) -> list[Path]:
    path = work / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return [path]


def _digits_json(work: Path) -> list[Path]:
    path = work / "digits.jsonl"
    path.write_text('{"campaign_id": "c1", "impressions": ' + "9" * 100_000 + "}\n")
    return [path]


def _nul_csv(work: Path) -> list[Path]:
    path = work / "nuls.csv"
    with path.open("wb") as out:
        for _ in range(1024):  # 1 GiB
            out.write(bytes(1 << 20))
    return [path]


def _deep_markdown(work: Path) -> list[Path]:
    path = work / "deep-list.md"
    path.write_text("".join("  " * i + f"- item {i}\n" for i in range(2000)))
    return [path]


def _fifo(work: Path) -> list[Path]:
    path = work / "pipe.txt"
    os.mkfifo(path)
    return [path]


def _blank_pages(work: Path) -> list[Path]:
    """10,000 pages that draw nothing in 1.3 MB: over the page budget (5,000), refused from the page count alone
    (before: surveyed as 10,000 pages to OCR, 500 units, each page rendered and read by Tesseract)."""
    from ingestion_pipeline.samples.scanned_pdf import write_blank_pages

    return [write_blank_pages(work / "blank-pages.pdf", 10_000)]


def _documents(files: list[Path]) -> list[list[str]]:
    return [["ingest", *map(str, files), "--tenant", "bench"]]


def _metrics(files: list[Path]) -> list[list[str]]:
    return [["metrics", "submit", str(files[0]), "--workspace", "bench", "--platform", "meta"], ["process"]]


CASES = [
    Case("docx-text-bomb", _docx, _documents, "ingestion_runs"),
    Case("xlsx-text-bomb", _xlsx, _documents, "ingestion_runs"),
    Case("giant-word", _giant_word, _documents, "ingestion_runs"),
    Case("token-bomb", _token_bomb, _documents, "ingestion_runs"),
    Case("deep-markdown", _deep_markdown, _documents, "ingestion_runs"),
    Case("blank-pages-pdf", _blank_pages, _documents, "ingestion_runs"),
    Case("fifo", _fifo, _documents, "ingestion_runs"),
    Case("deep-json", _deep_json, _metrics, "data_uploads"),
    Case("digits-json", _digits_json, _metrics, "data_uploads"),
    Case("nul-csv-1gb", _nul_csv, _metrics, "data_uploads"),
]


def run(case: Case, db_url: str, work: Path) -> tuple[str, str, float, float]:
    import psycopg

    files = case.make(work)
    env = {**os.environ, "DATABASE_URL": db_url, "INGESTION_DATA_DIR": str(work / "data"),
           "DAGSTER_HOME": str(work / "dagster_home")}
    (work / "dagster_home").mkdir(exist_ok=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
    started = time.monotonic()
    output, peak_kb = "", 0
    for command in case.commands(files):
        proc = subprocess.Popen(CLI + command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output += proc.stdout.read().decode(errors="replace")
        _, _status, usage = os.wait4(proc.pid, 0)
        peak_kb = max(peak_kb, usage.ru_maxrss)
    seconds = time.monotonic() - started
    with psycopg.connect(db_url) as conn:
        row = conn.execute(f"SELECT status, coalesce(error_code, '') , error FROM {case.table} "  # noqa: S608
                           "ORDER BY 1 DESC LIMIT 1").fetchone()
    if row is None:  # refused before a ledger row was written
        reason = next((line for line in output.splitlines() if "rejected" in line or "not" in line), output[-200:])
        return "rejected", reason.strip()[:90], seconds, peak_kb / 1024
    return row[0], f"{row[1]} {(row[2] or '')[:70]}".strip(), seconds, peak_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()
    chosen = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    print(f"{'case':<16} {'outcome':<10} {'s':>7} {'peak MB':>8}  error")
    for case in chosen:
        work = Path(tempfile.mkdtemp(prefix=f"ip-hostile-{case.name}-"))
        try:
            with throwaway_database("bench_hostile") as db_url:
                outcome, error, seconds, peak = run(case, db_url, work)
            print(f"{case.name:<16} {outcome:<10} {seconds:7.1f} {peak:8.0f}  {error}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
