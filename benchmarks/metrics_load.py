"""Metrics load: 1,000,000 daily-metric rows (1k campaigns, 10k ad sets, 100k ads, 10 days).

Times staging (stream + validate + COPY) and promotion of the file, then an overlapping re-load
(30 % of the keys again with new values, 70 % new), printing rows/s and the peak resident memory of
this process. Not part of the tests.

    .venv/bin/python benchmarks/metrics_load.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import tempfile
import time
from datetime import date
from pathlib import Path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ip-metrics-bench-"))
    os.environ["INGESTION_DATA_DIR"] = str(work)
    for var in ("DATABASE_URL", "DAGSTER_PG_URL"):
        os.environ.pop(var, None)
    logging.disable(logging.INFO)

    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres
    from ingestion_pipeline.core.upload_store import LocalUploadStore
    from ingestion_pipeline.metrics import pipeline
    from ingestion_pipeline.metrics.uploads import submit_metric_file
    from ingestion_pipeline.samples.metric_exports import daily_rows, write_export

    days = 10
    ads = max(1, args.rows // days)  # 100k ads at 1M rows: 10 ads per ad set, 10 ad sets per campaign
    campaigns = max(1, ads // 100)
    try:
        ctx = bootstrap()
        db = ctx.db
        store = LocalUploadStore(work / "metric_uploads")
        start = time.perf_counter()
        first = write_export(work / "load.csv", "meta", daily_rows(campaigns, 10, 10, days))
        # Overlap: days 8-10 again (30 % of the keys) with new values, days 11-17 new.
        second = write_export(work / "reload.csv", "meta", daily_rows(campaigns, 10, 10, days, seed=99,
                                                                        start=date(2024, 3, 8)))
        print(f"generated 2 x {campaigns * 100 * days:,} rows ({first.stat().st_size / 1e6:.0f} MB each) "
              f"in {time.perf_counter() - start:.0f} s; {campaigns:,} campaigns, {campaigns * 10:,} ad sets, "
              f"{campaigns * 100:,} ads")
        for label, path in (("initial load", first), ("overlapping re-load (30% of keys)", second)):
            with path.open("rb") as stream:
                submitted = submit_metric_file(db, store, workspace_id="bench", platform="meta", filename=path.name,
                                               stream=stream, max_bytes=10 * 2**30)
            key = submitted.partition_key
            pipeline.claim_upload(db, key, "benchmark")
            t0 = time.perf_counter()
            _, counts = pipeline.stage(db, key)
            staged_s = time.perf_counter() - t0
            assert pipeline.evaluate_threshold(db, key).passed
            t1 = time.perf_counter()
            result = pipeline.promote(db, key)
            promote_s = time.perf_counter() - t1
            print(f"{label}: staging {counts.total:,} rows in {staged_s:.1f} s "
                  f"({counts.total / staged_s:,.0f} rows/s); "
                  f"promotion in {promote_s:.1f} s ({result.promoted_rows / promote_s:,.0f} rows/s); "
                  f"status {result.status}; upserted {result.upserted}")
        with db.connection() as conn:
            total = conn.execute("SELECT count(*) AS n FROM daily_metrics").fetchone()["n"]
        print(f"daily_metrics rows: {total:,} (expected {int(campaigns * 100 * days * 1.7):,}: no duplicates)")
        print(f"peak resident memory of this process: {peak_rss_mb():.0f} MB")
    finally:
        stop_embedded_postgres(work / "pgdata")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
