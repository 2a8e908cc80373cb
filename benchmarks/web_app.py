"""The web app on a knowledge base: how long each page takes to load (warm), and how soon the live history shows a
file's move after the ledger's.

Runs `ingestion-pipeline serve` (development mode: the tenant signs in by name) on a knowledge base's data folder,
uploads a PDF through the API and processes it with page images on (so the inspector has pages to show), then asks
each page and route `--rounds` times after a warm-up and prints p50 / p95. The times are the client's on loopback:
the server's time plus one local round trip. The live history: a stream of `GET /v1/files/events` is open while a
file is uploaded; the time from the upload's answer (its ledger row committed) to the file's event on the stream.

    .venv/bin/python benchmarks/retrieval_quality.py --data-dir /tmp/rq    # once: the 9,717-chunk knowledge base
    .venv/bin/python benchmarks/web_app.py --data-dir /tmp/rq --tenant retrieval
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "ingestion-pipeline")
QUESTION = "how do researchers analyse the layout of scanned documents"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(client: httpx.Client, path: str, rounds: int) -> tuple[float, float, int]:
    client.get(path)  # warm
    times = []
    status = 0
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        status = response.status_code
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)], status


def _event_latency(client: httpx.Client, url: str, sample: bytes) -> float:
    """Milliseconds from an upload's answer (its ledger row committed) to its file's event on an open stream."""
    arrived: dict[int, float] = {}
    ready = threading.Event()
    stop = threading.Event()

    def listen() -> None:
        with httpx.Client(base_url=url, cookies=dict(client.cookies), timeout=None) as listener, \
                listener.stream("GET", "/v1/files/events") as stream:
            ready.set()
            for line in stream.iter_lines():
                if line.startswith("data: ") and line != "data: {}":
                    arrived.setdefault(json.loads(line[6:])["file_id"], time.perf_counter())
                if stop.is_set():
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(10)
    time.sleep(0.5)
    response = client.post("/v1/ingest", files={"file": ("event-probe.txt", sample, "text/plain")})
    answered = time.perf_counter()
    file_id = response.json()["file_id"]
    deadline = time.time() + 10
    while file_id not in arrived and time.time() < deadline:
        time.sleep(0.005)
    stop.set()
    return (arrived.get(file_id, float("nan")) - answered) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a knowledge base's data folder")
    parser.add_argument("--tenant", default="retrieval")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pdf", type=Path, default=ROOT.parent / "shared" / "corpus" / "documents" /
                        "layout-parser-paper-fast.pdf")
    args = parser.parse_args()
    env = {**os.environ, "INGESTION_DATA_DIR": str(args.data_dir), "AUTH_ENABLED": "false",
           "INGESTION_PAGE_IMAGES": "true", "DAGSTER_HOME": str(args.data_dir / "dagster_home"),
           "INGESTION_EMBEDDING_PRECISION": os.environ.get("INGESTION_EMBEDDING_PRECISION", "f32")}
    for name in ("DATABASE_URL", "DAGSTER_PG_URL"):
        env.pop(name, None)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (args.data_dir / "web-app-server.log").open("w")
    server = subprocess.Popen([CLI, "serve", "--port", str(port)], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the server did not start: {args.data_dir / 'web-app-server.log'}")
            time.sleep(0.5)
        with httpx.Client(base_url=url, timeout=60) as client:
            client.post("/app/sign-in", data={"tenant_id": args.tenant, "next": "/app/documents"})
            page = client.get("/app/documents").text
            client.headers["X-CSRF-Token"] = page.split('data-csrf="', 1)[1].split('"', 1)[0]
            client.post("/v1/ingest", files={"file": (args.pdf.name, args.pdf.read_bytes(), "application/pdf")})
            subprocess.run([CLI, "process"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            docs = client.get("/v1/documents", params={"search": args.pdf.name, "limit": 1}).json()["items"]
            doc_id = docs[0]["doc_id"]
            chunk_id = client.get(f"/v1/documents/{doc_id}/chunks").json()["chunks"][1]["chunk_id"]
            total = client.get("/v1/documents", params={"limit": 1}).json()["total"]
            print(f"web app on {args.data_dir} (tenant {args.tenant}, {total} documents), {args.rounds} rounds warm, "
                  "client time on loopback:")
            for name, path in [
                ("documents page", "/app/documents"),
                ("search page (the shell)", f"/app/search?q={QUESTION}"),
                ("search (what the page asks)", f"/v1/search?q={QUESTION}&k=10&context=1"),
                ("inspector page (the shell)", f"/app/documents/{doc_id}"),
                ("inspector: chunks", f"/v1/documents/{doc_id}/chunks"),
                ("inspector: a page image", f"/v1/documents/{doc_id}/pages/1/image"),
                ("inspector: a chunk's boxes", f"/v1/chunks/{chunk_id}/boxes"),
                ("ingestion history page", "/app/files"),
            ]:
                p50, p95, status = _timed(client, path, args.rounds)
                print(f"  {name:32} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   (HTTP {status})")
            latencies = [_event_latency(client, url, f"probe {i} {time.time()}".encode() * 20) for i in range(5)]
            print("  live history: upload answered -> its event on the stream: "
                  + ", ".join(f"{ms:.0f}" for ms in latencies) + " ms")
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    main()
