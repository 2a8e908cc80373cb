"""The cost of an index on daily_metrics.last_upload_id when a promotion inserts 1M facts.

Promotion's fact statement ends in a plain ``INSERT INTO daily_metrics … SELECT`` of the upload's picked
rows in (ad_id, date) order. This inserts the same 1M synthetic facts (100,000 ads × 10 days, sorted as
promotion sorts them) into two tables shaped like ``daily_metrics`` (its columns and defaults, its
primary key), one of them also with the B-tree on ``last_upload_id`` that ``sql/006`` created — in
alternating rounds, each after a CHECKPOINT, on a throwaway database — and prints the seconds of each.

    .venv/bin/python benchmarks/fact_insert.py [--rows 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from throwaway_database import throwaway_database  # noqa: E402

SOURCE = """CREATE TABLE picked AS
SELECT 'ad_' || lpad(mod(i, {ads})::text, 7, '0') AS ad_id, date '2024-01-01' + (i / {ads})::int AS date,
       mod(i * 7, 10000)::bigint AS impressions, mod(i, 97)::bigint AS clicks, mod(i, 1000) / 7.0 AS spend,
       'USD'::text AS currency, mod(i, 5)::numeric AS conversions
  FROM generate_series(0, {rows} - 1) AS i ORDER BY 1, 2"""
INSERT = """INSERT INTO facts (workspace_id, platform, ad_id, date, impressions, clicks, spend, currency, conversions,
                   last_upload_id)
SELECT 'bench', 'meta', ad_id, date, impressions, clicks, spend, currency, conversions, 1 FROM picked"""


def main() -> None:
    import psycopg
    from psycopg import sql

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[bool, list[float]] = {True: [], False: []}
    with throwaway_database("bench_facts") as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(SOURCE).format(rows=args.rows, ads=max(1, args.rows // 10)))
        for round_no in range(1, args.rounds + 1):
            for indexed in (True, False):
                conn.execute("DROP TABLE IF EXISTS facts")
                conn.execute("CREATE TABLE facts (LIKE daily_metrics INCLUDING DEFAULTS)")
                conn.execute("ALTER TABLE facts ADD PRIMARY KEY (workspace_id, platform, ad_id, date)")
                if indexed:
                    conn.execute("CREATE INDEX ON facts (last_upload_id)")
                conn.execute("CHECKPOINT")
                start = time.perf_counter()
                conn.execute(INSERT)
                seconds[indexed].append(time.perf_counter() - start)
                print(f"round {round_no}: {'with' if indexed else 'without'} the last_upload_id index "
                      f"{seconds[indexed][-1]:.2f} s", flush=True)
    with_index, without = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(f"{args.rows:,} facts, medians of {args.rounds}: with the index {with_index:.2f} s, without "
          f"{without:.2f} s ({with_index - without:+.2f} s for the index)")


if __name__ == "__main__":
    main()
