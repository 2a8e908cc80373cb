"""Staging's write path alone: COPY's text format (psycopg, what staging sends), COPY's CSV format and ADBC's
Postgres driver (binary COPY), same rows.

ADBC is the alternative to measure. This stages a 1M-row Meta Ads Manager export through the
Arrow path's validation (``BatchNormalizer``, no database), gives the typed columns their Arrow types
(ADBC's binary COPY needs them; the text and CSV COPYs let the server parse text), then writes every
batch in its own transaction into identical tables of an embedded Postgres — with ``COPY … FROM STDIN``
from ``staging_copy.copy_text`` as ``metrics/staging.py`` does, with ``COPY … (FORMAT csv)`` from
``pyarrow.csv.write_csv`` (what staging sent until the text format measured faster), and with ADBC's
``adbc_ingest`` — in alternating rounds, and prints the seconds of each (client encoding included).
Needs the ``bench`` extra.

    .venv/bin/python benchmarks/staging_copy.py [--rows 1000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

sys.path.insert(0, str(Path(__file__).parent))
from metrics_load import cli, database_url, generate  # noqa: E402

TYPES = {"upload_id": pa.int64(), "row_index": pa.int32(), "line_number": pa.int32(), "date": pa.date32(),
         "impressions": pa.int64(), "clicks": pa.int64(), "spend": pa.float64(), "conversions": pa.float64()}
# The same columns, as Postgres types; spend/conversions as double precision on both sides (ADBC writes
# Arrow decimals only with a fixed scale, which the raw figures do not have).
DDL = """CREATE TABLE {name} (upload_id bigint, row_index integer, line_number integer, entity_type text,
    natural_key_hash text, raw_data text, campaign_id text, ad_set_id text, ad_id text, campaign_name text,
    ad_set_name text, ad_name text, status text, date date, impressions bigint, clicks bigint,
    spend double precision, currency text, conversions double precision, validation_status text,
    validation_errors text, PRIMARY KEY (upload_id, row_index))"""


def staged_batches(path: Path) -> list[pa.Table]:
    """The export's rows as the Arrow path stages them, with their columns typed."""
    from ingestion_pipeline.metrics import staging
    from ingestion_pipeline.metrics.batch_normalization import BatchNormalizer
    from ingestion_pipeline.metrics.csv_batches import read_batches, scan_bytes
    from ingestion_pipeline.metrics.exports import locate_header
    from ingestion_pipeline.metrics.readers import csv_rows, open_text

    scan = scan_bytes(path)
    with path.open("rb") as stream:
        text, encoding = open_text(stream)
        seen, header_at, plan = locate_header(csv_rows(text), "meta")
    header_line, header = seen[header_at]
    normalizer = BatchNormalizer(plan, header, "bench", "meta", staging._dumps, check_controls=scan.has_controls)
    tables, first = [], 1
    for batch in read_batches(path, encoding=encoding, width=len(header), header_rows=header_at + 1,
                              first_data_line=header_line + 1, with_cr=scan.has_cr):
        staged = normalizer.stage(batch)
        columns = {"upload_id": pa.array([1] * staged.num_rows, pa.int64()),
                   "row_index": pa.array(range(first, first + staged.num_rows), pa.int32()),
                   **{name: staged[name] for name in staging._COLUMNS[2:]}}
        first += staged.num_rows
        tables.append(pa.table({name: _typed(name, values) for name, values in columns.items()}))
    return tables


def _typed(name: str, values):
    if name not in TYPES or values.type == TYPES[name]:
        return values
    if name == "date":
        return pc.cast(pc.strptime(values, format="%Y-%m-%d", unit="s"), pa.date32())
    return pc.cast(values, TYPES[name])


def write_csv_copy(url: str, tables: list[pa.Table], name: str) -> float:
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(url) as conn:
        for table in tables:
            buffer = io.BytesIO()
            pa_csv.write_csv(table, buffer, write_options=pa_csv.WriteOptions(include_header=False))
            with conn.transaction(), conn.cursor().copy(
                    f"COPY {name} ({', '.join(table.column_names)}) FROM STDIN (FORMAT csv)") as copy:
                copy.write(buffer.getbuffer())
    return time.perf_counter() - start


def write_text_copy(url: str, tables: list[pa.Table], name: str) -> float:
    import psycopg

    from ingestion_pipeline.metrics.staging_copy import copy_text

    start = time.perf_counter()
    with psycopg.connect(url) as conn:
        for table in tables:
            text = copy_text(table.columns)
            with conn.transaction(), conn.cursor().copy(
                    f"COPY {name} ({', '.join(table.column_names)}) FROM STDIN") as copy:
                copy.write(text)
    return time.perf_counter() - start


def write_adbc(url: str, tables: list[pa.Table], name: str) -> float:
    import adbc_driver_postgresql.dbapi as adbc

    start = time.perf_counter()
    with adbc.connect(url) as conn:
        for table in tables:
            with conn.cursor() as cursor:
                cursor.adbc_ingest(name, table, mode="append")
            conn.commit()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ip-copy-bench-"))
    try:
        path = generate(work, args.rows, ("meta.ads_manager_csv",))["meta.ads_manager_csv"]
        start = time.perf_counter()
        tables = staged_batches(path)
        rows = sum(t.num_rows for t in tables)
        print(f"staged {rows:,} rows in {len(tables)} batches (no database) in {time.perf_counter() - start:.1f} s",
              flush=True)
        cli(work, "db", "migrate")
        url = database_url(work)
        import psycopg

        writers = {"text COPY (psycopg)": ("text", write_text_copy), "csv COPY (psycopg)": ("csv", write_csv_copy),
                   "ADBC ingest (binary COPY)": ("adbc", write_adbc)}
        times: dict[str, list[float]] = {label: [] for label in writers}
        for round_no in range(1, args.rounds + 1):
            for label, (short, write) in writers.items():
                name = f"bench_{short}_{round_no}"
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(DDL.format(name=name))
                    conn.execute("CHECKPOINT")
                seconds = write(url, tables, name)
                times[label].append(seconds)
                print(f"round {round_no}: {label}: {seconds:.2f} s = {rows / seconds:,.0f} rows/s", flush=True)
        print(f"\n{'writer':<28}{'median s':>10}{'rows/s':>12}")
        for label, values in times.items():
            median = statistics.median(values)
            print(f"{label:<28}{median:>10.2f}{rows / median:>12,.0f}")
    finally:
        cli(work, "db", "stop")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
