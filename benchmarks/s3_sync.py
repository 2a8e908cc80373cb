"""S3 sync figures against a local moto server (127.0.0.1): a 5,000-key prefix.

Prints the time of the initial listing pass, of a re-sync of the unchanged prefix (no downloads,
no runs), and of the sync after modifying 1% of the objects (listing + processing the changed ones
through the document job). Not part of the tests.

    .venv/bin/python benchmarks/s3_sync.py [--keys 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--listing-only", action="store_true",
                        help="measure the sync passes only; queued objects are not processed")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ip-s3-bench-"))
    os.environ.update({"INGESTION_DATA_DIR": str(work), "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    for var in ("DATABASE_URL", "DAGSTER_PG_URL"):
        os.environ.pop(var, None)
    home = work / "dagster_home"
    home.mkdir()
    from ingestion_pipeline.core.settings import project_root

    shutil.copy(project_root() / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    logging.disable(logging.INFO)

    import boto3
    from moto.server import ThreadedMotoServer

    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.cli.documents import process_queued
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres
    from ingestion_pipeline.sources.registry import add_source, get_source
    from ingestion_pipeline.sources.sync import sync_source

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        ctx = bootstrap()
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")

        def put(i: int, suffix: str = "") -> None:
            body = f"# Note {i}\n\nNote number {i} records decision {i * 7 % 1000}.{suffix}\n".encode()
            client.put_object(Bucket="bench", Key=f"notes/n{i:05d}.md", Body=body)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, range(args.keys)))
        with ctx.db.connection() as conn:
            add_source(conn, "s3://bench/notes/", tenant_id="bench", name="bench", endpoint_url=endpoint)

        def full_pass():
            with ctx.db.connection() as conn:
                source = get_source(conn, "bench")
            start = time.perf_counter()
            report = sync_source(ctx.db, source, client, max_bytes=50 * 1024 * 1024, max_pages=None)
            return time.perf_counter() - start, report

        def process() -> float:
            if args.listing_only:
                return 0.0
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                process_queued(ctx, argparse.Namespace(json=True))
            return time.perf_counter() - start

        initial_s, initial = full_pass()
        initial_process_s = process()

        resync_s, resync = full_pass()

        changed = max(1, args.keys // 100)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: put(i, " Revised."), range(0, args.keys, args.keys // changed)))
        modified_s, modified = full_pass()
        modified_process_s = process()

        print(f"prefix: {args.keys} keys (moto S3 on 127.0.0.1, page size 1000)"
              + (" -- listing only, queued objects not processed" if args.listing_only else ""))
        print(f"initial listing pass: {initial_s:.2f} s ({initial.new} new keys queued); "
              f"processing them: {initial_process_s:.1f} s")
        print(f"re-sync of the unchanged prefix: {resync_s:.2f} s (listed {resync.listed}, unchanged "
              f"{resync.unchanged}, queued {resync.new + resync.changed})")
        print(f"sync after modifying {changed} objects (1%): listing {modified_s:.2f} s "
              f"(changed {modified.changed}); processing the changed objects: {modified_process_s:.1f} s; "
              f"total {modified_s + modified_process_s:.1f} s")
    finally:
        server.stop()
        stop_embedded_postgres(work / "pgdata")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
