"""Every request, not only an upload, is bounded in time and in bytes, against the real server (uvicorn).

Before: uvicorn bounded neither the time a client took to send its headers nor a JSON body. A connection that
sent half a request line and then a byte now and then (slowloris), or nothing at all, stayed open for good; a
1 GB body to ``/v1/auth/token`` was read into the server's memory; a trickled JSON body held its connection.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ingestion_pipeline.api.header_deadline import MAX_HEADER_BYTES, protocol_with_header_deadline
from ingestion_pipeline_tests.api.conftest import start_server
from ingestion_pipeline_tests.hostile.test_slow_uploads import read_answer

HEADER_TIMEOUT = 2
IDLE_SECONDS = 2


def _connect(url: str) -> socket.socket:
    address = urlparse(url)
    return socket.create_connection((address.hostname, address.port), timeout=30)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


@pytest.mark.integration
def test_slow_or_silent_headers_get_408_and_a_closed_connection(database_url, tmp_path):
    with start_server(database_url, tmp_path, INGESTION_API_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT)) as server:
        started = time.monotonic()
        stalled = [_connect(server.url) for _ in range(20)]
        for sock in stalled:
            sock.sendall(b"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        silent = _connect(server.url)
        trickle = _connect(server.url)
        trickle.sendall(b"GET /healthz HTTP/1.1\r\n")

        # meanwhile the server answers everyone else
        assert httpx.get(f"{server.url}/v1/files", headers=server.headers, timeout=10).status_code == 200

        status = 0
        while status == 0 and time.monotonic() - started < HEADER_TIMEOUT + 10:
            try:
                trickle.sendall(b"X")  # never idle, never done
            except OSError:
                break
            status, data, _closed = read_answer(trickle, within=0.5)
        assert status == 408 and b'"headers_too_slow"' in data, data
        for sock in stalled:
            status, data, closed = read_answer(sock, within=HEADER_TIMEOUT + 10)
            assert status == 408 and b"did not arrive within 2 s" in data, data
            assert closed
        assert _closed_within(silent, HEADER_TIMEOUT + 10)  # a connection that never spoke is closed too
        assert time.monotonic() - started < HEADER_TIMEOUT + 10
        for sock in (*stalled, silent, trickle):
            sock.close()


@pytest.mark.integration
def test_the_next_request_on_a_kept_alive_connection_has_the_same_deadline(database_url, tmp_path):
    with start_server(database_url, tmp_path, INGESTION_API_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT)) as server:
        sock = _connect(server.url)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _data, closed = read_answer(sock, within=10)
        assert status == 200 and not closed
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        status, data, closed = read_answer(sock, within=HEADER_TIMEOUT + 10)
        assert status == 408 and b'"headers_too_slow"' in data and closed, data
        sock.close()


def test_headers_over_64_kib_get_431(database_url, tmp_path):
    with start_server(database_url, tmp_path) as server:
        sock = _connect(server.url)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for i in range(200):  # 200 x 1 KiB headers, never finished
                sock.sendall(f"X-Filler-{i}: {'a' * 1024}\r\n".encode())
        except OSError:
            pass  # the server closed the connection after its answer
        status, data, _closed = read_answer(sock, within=10)
        assert status == 431 and b'"headers_too_large"' in data, data
        sock.close()


@pytest.mark.integration
def test_a_json_body_is_bounded_in_bytes_and_in_time(database_url, tmp_path):
    with start_server(database_url, tmp_path, INGESTION_API_UPLOAD_IDLE_SECONDS=str(IDLE_SECONDS)) as server:
        rss_before = server.status("VmHWM")
        # a declared gigabyte: refused before a byte of it is read
        sock = _connect(server.url)
        sock.sendall(b"POST /v1/auth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n{\"email\": \"")
        status, data, closed = read_answer(sock, within=10)
        assert status == 413 and b'"too_large"' in data and b"1,000,000,000 bytes" in data, data
        sock.close()

        # the same with no length declared (chunked): refused once past the limit, 64 MiB offered
        def chunks():
            for _ in range(64):
                yield b"[" + b"0," * (512 * 1024) + b"0]"

        try:
            refused = httpx.post(f"{server.url}/v1/auth/token", content=chunks(), timeout=30,
                                 headers={"Content-Type": "application/json"})
            assert refused.status_code == 413 and refused.json()["error"]["code"] == "too_large", refused.text
        except httpx.TransportError:
            pass  # the server answered 413 and closed while the client was still sending: also refused
        assert server.status("VmHWM") - rss_before < 32 * 2**20  # the body was never held

        # a trickled body: 408 once the idle time has passed
        sock = _connect(server.url)
        started = time.monotonic()
        sock.sendall(b"POST /v1/auth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"email\"")
        status, data, closed = read_answer(sock, within=IDLE_SECONDS + 10)
        assert status == 408 and b'"body_too_slow"' in data and closed, data
        assert time.monotonic() - started < IDLE_SECONDS + 10
        sock.close()

        # an ordinary JSON request still works
        ok = httpx.post(f"{server.url}/v1/auth/token", json={"email": "nobody@acme.example", "password": "x" * 12},
                        timeout=10)
        assert ok.status_code in (400, 401), ok.text  # reached the route: wrong credentials, not a bound


@pytest.mark.parametrize("base", ["h11", "httptools"])
def test_both_of_uvicorns_http_protocols_keep_the_deadline(base):
    """The server takes httptools when it is installed and h11 otherwise: the bounds hold on either."""
    protocol = {"h11": H11Protocol, "httptools": HttpToolsProtocol}[base]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                           http=protocol_with_header_deadline(1.0, protocol)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url, timeout=5).text == "ok"
        slow = _connect(url)
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        status, data, closed = read_answer(slow, within=10)
        assert status == 408 and b'"headers_too_slow"' in data and closed, data
        large = _connect(url)
        large.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Large: " + b"a" * (MAX_HEADER_BYTES + 1))
        status, data, _closed = read_answer(large, within=10)
        if base == "h11":  # h11 bounds an incomplete request itself (16 KiB), before the mixin's 64 KiB
            assert status == 400 and b"Invalid HTTP request" in data, data
        else:
            assert status == 431 and b'"headers_too_large"' in data, data
        for sock in (slow, large):
            sock.close()
    finally:
        server.should_exit = True
        thread.join(10)
