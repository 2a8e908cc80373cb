"""Metric exports side by side with dlt, in one run, on the same files and the same Postgres.

Ours: ``metrics submit`` + ``process`` (staging with per-row validation, the threshold check,
promotion into campaigns / ad sets / ads / daily metrics — the Dagster run included), as
``metrics_load.py`` runs it. dlt: ``write_disposition="merge"`` on the same natural key (``Ad ID``,
``Day``) into its own dataset of the same database, fed two ways — dicts from ``csv.DictReader`` (its
simplest use) and pyarrow tables from ``pyarrow.csv.open_csv`` (its fast path). dlt loads the columns as
they are: it validates nothing and skips the Google report's title and ``Total`` rows only because this
script does so for it. Needs the ``bench`` extra: ``.venv/bin/pip install -e '.[bench]'``.

With ``--rounds N`` ours and dlt's Arrow path run N times, interleaved, the first to run alternating
(ours then dlt in odd rounds, dlt then ours in even ones; each round into new tables), and the table shows
medians: on a shared 2-core machine one run of each can
differ by ±15 % from the next. dlt's dict path (minutes per export) runs once, or not at all with
``--skip-dicts`` (its column then shows nan). ``--settled`` starts every timed run (ours and dlt's)
after ``metrics_load.settle``: VACUUM, CHECKPOINT and sync of what the previous run left, which otherwise
the next run pays for (a round's second export took 12.3 s first and 15.2 s second). ``--one-table``
makes dlt's Arrow path merge every round into one table (each round's rows under their own ``workspace``,
part of the key), which grows as our ``daily_metrics`` does; by default each round loads a new, empty
table. ``--keyed`` adds dlt's Arrow path into a table that, like our ``daily_metrics``, has a unique
index on the natural key (dlt's own table has none).

    .venv/bin/python benchmarks/compare_dlt.py [--rows 1000000] [--rounds 3] [--skip-dicts] [--keyed]
        [--settled] [--one-table]
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from metrics_load import DEFAULT_LAYOUTS, cli, database_url, generate, run_ours, settle  # noqa: E402

KEY = ("Ad ID", "Day")
# Rows above the header in each export (the Google report has a title and a date-range line).
PREAMBLE = {"meta.ads_manager_csv": 0, "google.ui_report_csv": 2, "tiktok.ads_manager_csv": 0}


def dict_rows(path: Path, preamble: int, workspace: str | None = None) -> Iterator[dict]:
    with path.open(newline="", encoding="utf-8-sig") as stream:
        for _ in range(preamble):
            stream.readline()
        for row in csv.DictReader(stream):
            if not row["Day"].startswith("Total"):
                yield row if workspace is None else {"workspace": workspace, **row}


def arrow_tables(path: Path, preamble: int, workspace: str | None = None) -> Iterator:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv

    # Google's "--" means no value: without null_values Arrow's type inference stops at it
    reader = pa_csv.open_csv(path, read_options=pa_csv.ReadOptions(skip_rows=preamble),
                             convert_options=pa_csv.ConvertOptions(column_types={k: pa.string() for k in KEY},
                                                                   null_values=["", "--"], strings_can_be_null=True))
    for batch in reader:
        table = pa.Table.from_batches([batch])
        table = table.filter(pc.invert(pc.starts_with(table["Day"], "Total")))
        yield table if workspace is None else table.add_column(0, "workspace", pa.array([workspace] * len(table)))


def _add_unique_key(pipeline, path: Path, preamble: int) -> None:
    """Give dlt's table the unique index on the natural key that our ``daily_metrics`` has (dlt's Postgres
    destination creates none for a ``primary_key`` hint: only ``unique`` columns get a constraint, and the
    key is two columns). dlt creates the table on its first load, so one row is loaded first, untimed."""
    import dlt

    first = next(arrow_tables(path, preamble)).slice(0, 1)
    pipeline.run(dlt.resource([first], name="daily_metrics", write_disposition="merge", primary_key=KEY))
    with pipeline.sql_client() as client:
        client.execute_sql(f"CREATE UNIQUE INDEX ON {client.make_qualified_table_name('daily_metrics')} (ad_id, day)")


def run_dlt(work: Path, files: dict[str, Path], mode: str, round_no: int = 1, *,
            settled: bool = False, one_table: bool = False) -> dict[str, float]:
    """dlt's ``pipeline.run`` of each export, seconds. Each round into a new dataset; with ``one_table``
    every round merges into the same table, its rows under a ``workspace`` of their own (part of the key),
    so that table grows round by round as our ``daily_metrics`` does."""
    import dlt
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(database_url(work))
    # dlt takes the socket folder of the embedded server as a query parameter
    credentials = (f"postgresql://{info['user']}:unused@localhost:{info.get('port', 5432)}/{info['dbname']}"
                   f"?host={info['host']}")
    times = {}
    for layout, path in files.items():
        feed = dict_rows if mode == "dicts" else arrow_tables
        workspace = f"bench-{round_no}" if one_table else None
        resource = dlt.resource(feed(path, PREAMBLE[layout], workspace), name="daily_metrics",
                                write_disposition="merge", primary_key=("workspace", *KEY) if one_table else KEY)
        name = f"{mode.replace('-', '_')}_{layout.split('.')[0]}"
        if not one_table:
            name += f"_{round_no}"  # a new pipeline and dataset each round
        pipeline = dlt.pipeline(pipeline_name=f"bench_{name}",
                                destination=dlt.destinations.postgres(credentials=credentials),
                                dataset_name=f"dlt_{name}", pipelines_dir=str(work / "dlt"))
        if mode == "arrow-keyed":
            _add_unique_key(pipeline, path, PREAMBLE[layout])
        if settled:
            settle(work)
        start = time.perf_counter()
        pipeline.run(resource)
        times[layout] = time.perf_counter() - start
        rows = ""
        if one_table:  # the table holds every round's rows so far
            with pipeline.sql_client() as client:
                table = client.make_qualified_table_name("daily_metrics")
                with client.execute_query(f"SELECT count(*) FROM {table}") as cursor:
                    rows = f" (its table now {cursor.fetchone()[0]:,} rows)"
        print(f"dlt {mode}: {layout} in {times[layout]:.1f} s{rows}", flush=True)
    return times


def dlt_start_up() -> float:
    """Seconds a fresh Python takes to import dlt and pyarrow's CSV reader (median of 3). dlt's times above
    are ``pipeline.run`` in this already warm process; ours are two CLI processes that each start cold."""
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import dlt, pyarrow.csv"], check=True)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved runs of ours and dlt's Arrow path")
    parser.add_argument("--skip-dicts", action="store_true", help="leave out dlt's dict path (minutes per export)")
    parser.add_argument("--keyed", action="store_true",
                        help="also dlt's Arrow path into a table with a unique index on the key, as ours has")
    parser.add_argument("--one-table", action="store_true",
                        help="dlt merges every round into one table that grows, as our daily_metrics does")
    parser.add_argument("--settled", action="store_true",
                        help="before every timed run, VACUUM, CHECKPOINT and sync what the previous run left")
    args = parser.parse_args()
    if args.one_table and args.keyed:
        parser.error("--one-table and --keyed cannot be combined")
    logging.getLogger("dlt").setLevel(logging.ERROR)
    os.environ.setdefault("RUNTIME__LOG_LEVEL", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="ip-dlt-bench-"))
    os.environ["DLT_DATA_DIR"] = str(work / "dlt")
    try:
        files = generate(work, args.rows, DEFAULT_LAYOUTS)
        ours_runs: dict[str, list[float]] = {layout: [] for layout in files}
        arrow_runs: dict[str, list[float]] = {layout: [] for layout in files}
        keyed_runs: dict[str, list[float]] = {layout: [] for layout in files}

        def run_ours_round(round_no: int) -> None:
            for result in run_ours(work, files, round_no, settled=args.settled):
                ours_runs[result.layout].append(result.total_s)

        for round_no in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"-- round {round_no} of {args.rounds}", flush=True)
            if round_no % 2 == 1:  # the side that runs second pays for the first one's background work
                run_ours_round(round_no)
            for layout, seconds in run_dlt(work, files, "arrow", round_no, settled=args.settled,
                                           one_table=args.one_table).items():
                arrow_runs[layout].append(seconds)
            if args.keyed:
                for layout, seconds in run_dlt(work, files, "arrow-keyed", round_no, settled=args.settled).items():
                    keyed_runs[layout].append(seconds)
            if round_no % 2 == 0:
                run_ours_round(round_no)
        dicts = ({layout: math.nan for layout in files} if args.skip_dicts
                 else run_dlt(work, files, "dicts", settled=args.settled))
        label = "" if args.rounds == 1 else f" (medians of {args.rounds} interleaved rounds)"
        print(f"\n{'export':<24}{'ours (validated)':>18}{'dlt dicts':>12}{'dlt arrow':>12}"
              f"{'dicts ÷ ours':>14}{'arrow ÷ ours':>14}{label}")
        for layout in files:
            total, arrow = statistics.median(ours_runs[layout]), statistics.median(arrow_runs[layout])
            print(f"{layout:<24}{total:>16.1f} s{dicts[layout]:>10.1f} s{arrow:>10.1f} s"
                  f"{dicts[layout] / total:>13.2f}×{arrow / total:>13.2f}×")
        print(f"not in dlt's times: a fresh process importing dlt takes {dlt_start_up():.1f} s "
              "(ours include `metrics submit` and `process` each starting cold)")
        if args.keyed:
            for layout in files:
                keyed, total = statistics.median(keyed_runs[layout]), statistics.median(ours_runs[layout])
                print(f"{layout:<24} dlt arrow, table with a unique key: {keyed:.1f} s ({keyed / total:.2f}× ours)")
        if args.rounds > 1:
            for layout in files:
                print(f"{layout}: ours {', '.join(f'{x:.1f}' for x in ours_runs[layout])} s; "
                      f"dlt arrow {', '.join(f'{x:.1f}' for x in arrow_runs[layout])} s"
                      + (f"; keyed {', '.join(f'{x:.1f}' for x in keyed_runs[layout])} s" if args.keyed else ""))
    finally:
        cli(work, "db", "stop")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
