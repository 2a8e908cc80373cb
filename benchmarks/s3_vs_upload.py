"""The same small files ingested from uploads and from an S3 source, side by side.

Each round: ``ingestion-pipeline ingest`` of the files (upload path) and ``ingestion-pipeline sync NAME
--wait`` of a source holding the same files (S3 path: listing, download, the same job), each a fresh
process into a fresh tenant, in alternating order. The S3 API is a moto server in its own process on
127.0.0.1 (no latency: what is measured is our own cost per object). Prints the medians and the ratio.

    .venv/bin/python benchmarks/s3_vs_upload.py [--files 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus" / "documents"))
    args = parser.parse_args()
    from compare_peers import prepare_model, small_files

    work = Path(tempfile.mkdtemp(prefix="ip-s3-upload-"))
    (work / "dagster_home").mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL")}
    env.update(INGESTION_DATA_DIR=str(work / "data"), DAGSTER_HOME=str(work / "dagster_home"),
               AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = [str(BIN / "ingestion-pipeline")]
    times: dict[str, list[float]] = {"upload": [], "s3": []}
    try:
        import boto3

        for _ in range(100):
            try:
                client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                      aws_access_key_id="bench", aws_secret_access_key="bench")
                client.create_bucket(Bucket="bench")
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                time.sleep(0.2)
        subprocess.run([*cli, "db", "migrate"], env=env, check=True, capture_output=True)
        prepare_model(env)
        for r in range(args.rounds):
            files = small_files(Path(args.corpus), work / f"files-{r}", args.files)
            for path in files:
                client.put_object(Bucket="bench", Key=f"r{r}/{path.name}", Body=path.read_bytes())
            subprocess.run([*cli, "source", "add", f"s3://bench/r{r}/", "--tenant", f"s3_{r}", "--name", f"r{r}",
                            "--endpoint-url", endpoint], env=env, check=True, capture_output=True)
            paths = {"upload": [*cli, "ingest", "--tenant", f"up_{r}", "--json", *map(str, files)],
                     "s3": [*cli, "sync", f"r{r}", "--wait", "--json"]}
            for path in (("upload", "s3") if r % 2 == 0 else ("s3", "upload")):
                start = time.perf_counter()
                done = subprocess.run(paths[path], env=env, capture_output=True, text=True)
                seconds = time.perf_counter() - start
                if done.returncode != 0:
                    raise SystemExit(f"{path} failed:\n{done.stderr[-2000:]}")
                succeeded = done.stdout.count('"status": "succeeded"')
                times[path].append(seconds)
                print(f"round {r + 1} {path:6} {seconds:6.1f} s  ({succeeded} files succeeded)", flush=True)
        upload, s3 = statistics.median(times["upload"]), statistics.median(times["s3"])
        print(f"\n{args.files} files: upload path {upload:.1f} s, S3 path {s3:.1f} s (median of {args.rounds}); "
              f"S3 ÷ upload = {s3 / upload:.2f}×")
    finally:
        moto.terminate()
        moto.wait(10)
        subprocess.run([*cli, "db", "stop"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
