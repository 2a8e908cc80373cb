"""uvicorn's HTTP protocol with a bound on a request's headers: in time and in bytes.

uvicorn bounds neither: a client that sends ``GET / HTTP/1.1`` and then one header byte every few seconds holds
its connection (and the server's memory for the headers) for as long as it likes, and any data received
cancels the keep-alive timer. Here a connection whose request line and headers are not complete
``header_timeout`` seconds after it opened (or after its previous response) gets 408 ``headers_too_slow``;
headers over ``MAX_HEADER_BYTES`` get 431 ``headers_too_large``. Either way the connection is closed.

A request whose headers are complete is the application's: its body is bounded by ``body_bounds`` (JSON
requests) or ``upload_slots`` (streaming uploads). Limits per client address belong to the proxy in front.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

MAX_HEADER_BYTES = 64 * 1024  # the request line and every header; browsers send a few KiB
LINGER_SECONDS = 2.0  # after a refusal, how long the client's remaining bytes are read and dropped


def _response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class HeaderDeadline:
    """Mixin for uvicorn's HTTP protocol classes (httptools or h11): the bounds of the module docstring."""

    header_timeout: float = 10.0
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._await_headers()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0
        self._cancel_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _cancel_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already: what the client still sends is dropped until the connection closes
        if self._awaiting_headers:
            self._header_bytes += len(data)
        super().data_received(data)  # type: ignore[misc]
        if self._awaiting_headers and self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
            self._refuse(431, "Request Header Fields Too Large", "headers_too_large",
                         f"the request line and headers exceed {MAX_HEADER_BYTES:,} bytes")

    def on_headers_complete(self) -> None:  # httptools
        self._headers_done()
        super().on_headers_complete()  # type: ignore[misc]

    def handle_events(self) -> None:  # h11: a Request event means the headers are complete
        super().handle_events()  # type: ignore[misc]
        if self.cycle is not None and not self.cycle.response_complete:
            self._headers_done()

    def _headers_done(self) -> None:
        self._awaiting_headers = False
        self._cancel_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        serving = self.cycle is not None and not self.cycle.response_complete  # a pipelined request started
        if not serving and not self.transport.is_closing():
            self._await_headers()  # the next request on this connection has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self._awaiting_headers or self.transport.is_closing():
            return
        if self._header_bytes == 0:  # an idle keep-alive connection: nothing to answer
            self.transport.close()
            return
        self._refuse(408, "Request Timeout", "headers_too_slow",
                     f"the request's headers did not arrive within {self.header_timeout:g} s "
                     f"({self._header_bytes:,} bytes received)")

    def _refuse(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer, then close after a short linger: closing with the client's bytes unread would reset the
        connection, and the client would lose the answer."""
        self._awaiting_headers = False
        self._refused = True
        self._cancel_timer()
        self.transport.write(_response(status, reason, code, message))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._header_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def eof_received(self) -> bool | None:
        if self._refused:
            self.transport.close()
            return None
        return super().eof_received()  # type: ignore[misc]


def protocol_with_header_deadline(header_timeout: float,
                                  base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's protocol class (by default the one ``http="auto"`` picks: httptools when installed, else h11)
    with the deadline, for ``uvicorn.run(http=...)``."""
    return type(f"HeaderDeadline{base.__name__}", (HeaderDeadline, base), {"header_timeout": header_timeout})
