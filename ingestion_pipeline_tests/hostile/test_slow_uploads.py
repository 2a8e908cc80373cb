"""Slow uploads cannot starve other tenants. Before: eight connections to ``POST /v1/ingest`` that sent their
headers (``Content-Length: 1000000``) and ~100 body bytes, then nothing, held every upload slot, and every
tenant got 503 for as long as the sockets stayed open (150 s+ observed).

Now, against the real server (`ingestion-pipeline serve`, uvicorn): one tenant holds at most half the slots
(the rest of its connections get 429 at once), another tenant's upload is accepted while they stall, and the
stalled ones get 408 and a closed connection once the idle time (3 or 6 s here) has passed.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

from ingestion_pipeline_tests.api.conftest import start_server, user_token

BOUNDARY = "hostileboundary"
IDLE_SECONDS = 3


def _stall(url: str, token: str) -> socket.socket:
    """Headers promising a megabyte, the start of the file part, then nothing."""
    address = urlparse(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    head = (f"POST /v1/ingest HTTP/1.1\r\nHost: {address.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: 1000000\r\n\r\n")
    part = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\nthe first bytes, and then nothing more")
    sock.sendall(head.encode() + part.encode())
    return sock


def read_answer(sock: socket.socket, within: float) -> tuple[int, bytes, bool]:
    """(status, response bytes, whether the server closed the connection), read within ``within`` seconds."""
    sock.settimeout(within)
    data = b""
    closed = False
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            break
        if not piece:
            closed = True
            break
        data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if length is not None and len(body) >= length and b"connection: close" not in head.lower():
            break
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data, closed


@pytest.mark.integration
def test_stalled_uploads_get_408_and_do_not_starve_another_tenant(database_url, tmp_path):
    idle = 2 * IDLE_SECONDS  # room for eight stalls and an upload on a loaded 2-core machine before any 408
    with start_server(database_url, tmp_path, INGESTION_API_UPLOAD_IDLE_SECONDS=str(idle)) as server:
        attackers = [user_token(database_url, "acme", f"attacker{i}@acme.example") for i in range(4)]
        victim = user_token(database_url, "bravo", "someone@bravo.example")
        started = time.monotonic()
        sockets = [_stall(server.url, attackers[i % 4]) for i in range(8)]
        time.sleep(0.5)
        answers = [read_answer(sock, within=0.3) for sock in sockets]
        refused = [a for a in answers if a[0] == 429]
        held = [sock for sock, a in zip(sockets, answers, strict=True) if a[0] == 0]
        assert len(refused) == 4 and len(held) == 4, answers  # acme holds 4 of the 8 slots, no more
        assert b'"too_many_uploads"' in refused[0][1] and b"retry-after" in refused[0][1].lower()

        accepted = httpx.post(f"{server.url}/v1/ingest", headers={"Authorization": f"Bearer {victim}"},
                              files={"file": ("fine.txt", b"bravo's file goes through\n", "text/plain")}, timeout=30)
        assert accepted.status_code == 202, accepted.text
        # accepted while acme's connections still stall (none of them answered yet), not after they were dropped
        assert [read_answer(sock, within=0.05)[0] for sock in held] == [0] * len(held)

        for sock in held:
            status, data, closed = read_answer(sock, within=idle + 10)
            assert status == 408 and b'"upload_too_slow"' in data, data
            assert closed or b"connection: close" in data.lower()
            sock.close()
        assert time.monotonic() - started < idle + 10
        for sock in sockets:
            sock.close()
        # the slots are free again: acme uploads
        again = httpx.post(f"{server.url}/v1/ingest", headers={"Authorization": f"Bearer {attackers[0]}"},
                           files={"file": ("later.txt", b"a normal upload\n", "text/plain")}, timeout=30)
        assert again.status_code == 202, again.text
        assert not list(server.upload_dir.rglob(".incoming-*"))  # the dropped uploads left nothing behind


@pytest.mark.integration
def test_a_trickle_under_the_minimum_rate_is_dropped(database_url, tmp_path):
    """One byte a second never idles, but averages far under the minimum rate: 408 after the idle time."""
    with start_server(database_url, tmp_path, INGESTION_API_UPLOAD_IDLE_SECONDS="2") as server:
        token = user_token(database_url, "acme", "trickle@acme.example")
        sock = _stall(server.url, token)
        started = time.monotonic()
        status = 0
        while time.monotonic() - started < 15:
            try:
                sock.sendall(b"x")
            except OSError:
                break
            status, data, _closed = read_answer(sock, within=1.0)
            if status:
                break
        assert status == 408 and b"bytes/s, under the minimum" in data, data
        assert time.monotonic() - started < 10
        sock.close()
