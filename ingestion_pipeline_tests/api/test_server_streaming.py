"""A real uvicorn server (`ingestion-pipeline serve`) on a random 127.0.0.1 port: uploads stream to the
store in bounded memory, oversize bodies are refused with nothing left, and a 9th concurrent upload waits
its turn with a 503."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator

import httpx
import pytest

from ingestion_pipeline_tests.api.conftest import Server, start_server, user_token
from ingestion_pipeline_tests.helpers import table

MB = 1024 * 1024


@pytest.fixture
def server(database_url, tmp_path) -> Iterator[Server]:
    with start_server(database_url, tmp_path) as running:
        yield running



BOUNDARY = "----ingestion-test-boundary"


def _multipart(filename: str, size: int, *, piece: int = 256 * 1024, gate=None):
    """A multipart body generated piece by piece (sent chunked: no Content-Length)."""
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    line = b"All work and no play makes a streaming upload bounded in memory.\n"
    block = (line * (piece // len(line) + 1))[:piece]
    digest = hashlib.sha256()

    def content():
        yield head
        sent = 0
        while sent < size:
            part = block[: min(piece, size - sent)]
            digest.update(part)
            sent += len(part)
            yield part
        yield tail

    return content, digest


HEADERS = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def test_a_45_mb_upload_streams_in_bounded_memory(server, db):
    warm = httpx.post(f"{server.url}/v1/ingest", headers=server.headers,
                      files={"file": ("warm.txt", b"warm up the handler\n", "text/plain")}, timeout=60)
    assert warm.status_code == 202, warm.text
    time.sleep(0.5)
    before = server.status("VmRSS")
    server.reset_peak()
    content, digest = _multipart("big.txt", 45 * MB)
    r = httpx.post(f"{server.url}/v1/ingest", headers={**server.headers, **HEADERS}, content=content(), timeout=120)
    assert r.status_code == 202, r.text
    peak = server.status("VmHWM")
    growth = peak - before
    print(f"server RSS before {before / MB:.1f} MB, peak during a 45 MB upload {peak / MB:.1f} MB "
          f"(+{growth / MB:.1f} MB)")
    assert growth < 20 * MB
    assert r.json()["sha256"] == digest.hexdigest() and r.json()["size_bytes"] == 45 * MB
    stored = server.upload_dir / "acme" / digest.hexdigest()
    assert stored.stat().st_size == 45 * MB


@pytest.mark.parametrize("framing", ["chunked", "content_length"])
def test_a_60_mb_upload_is_refused_with_413_and_leaves_nothing(server, db, framing):
    content, _ = _multipart("huge.txt", 60 * MB)
    body = content() if framing == "chunked" else b"".join(content())
    r = httpx.post(f"{server.url}/v1/ingest", headers={**server.headers, **HEADERS}, content=body, timeout=120)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "too_large"
    assert table(db, "SELECT file_id FROM ingestion_runs") == []
    left = [p for p in server.upload_dir.rglob("*") if p.is_file()] if server.upload_dir.exists() else []
    assert left == []
    assert httpx.get(f"{server.url}/healthz").status_code == 200  # and the server is fine


def test_the_ninth_concurrent_upload_gets_503_with_retry_after(server, database_url, db):
    """Eight uploads stream (two tenants, two users each: a tenant holds at most half the slots, a user half of
    that); a ninth, from a third tenant, is refused with 503 and Retry-After, and is accepted once they end."""
    tokens = [user_token(database_url, tenant, f"u{i}@{tenant}.example") for tenant in ("acme", "bravo")
              for i in range(2)]
    third = user_token(database_url, "carol", "u@carol.example")

    def body(name: str) -> bytes:
        return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                "Content-Type: text/plain\r\n\r\n" + name + "\r\n--" + BOUNDARY + "--\r\n").encode()

    async def scenario():
        gate = asyncio.Event()

        async def held_body(i: int):
            yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f{i}.txt\"\r\n"
                   "Content-Type: text/plain\r\n\r\n").encode() + f"file {i} begins\n".encode()
            await gate.wait()
            yield f"file {i} ends\n\r\n--{BOUNDARY}--\r\n".encode()

        async with httpx.AsyncClient(base_url=server.url, headers=HEADERS, timeout=60,
                                     limits=httpx.Limits(max_connections=20)) as client:
            held = [asyncio.create_task(client.post("/v1/ingest", content=held_body(i), headers={
                "Authorization": f"Bearer {tokens[i % 4]}"})) for i in range(8)]
            # once all eight are streaming (each waiting for the rest of its body), another one is refused
            for attempt in range(40):
                await asyncio.sleep(0.5)
                ninth = await client.post("/v1/ingest", content=body(f"n{attempt}.txt"),
                                          headers={"Authorization": f"Bearer {third}"})
                if ninth.status_code == 503 or any(task.done() for task in held):
                    break
            gate.set()
            finished = await asyncio.gather(*held)
            after = await client.post("/v1/ingest", content=body("late.txt"),
                                      headers={"Authorization": f"Bearer {third}"})
            return ninth, finished, after

    ninth, finished, after = asyncio.run(scenario())
    assert ninth.status_code == 503, ninth.text
    assert ninth.headers["retry-after"] and ninth.json()["error"]["code"] == "busy"
    assert [r.status_code for r in finished] == [202] * 8
    assert after.status_code == 202  # the slots are free again
