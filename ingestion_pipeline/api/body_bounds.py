"""Bounds on every request body: in bytes and in time, so no client holds the server's memory or a connection.

``paced_body``: a body that sends nothing for ``idle_seconds``, or arrives slower than ``min_bytes_per_second``
on average once ``idle_seconds`` have passed, ends with 408 and the connection closed. The streaming upload
routes use it as they parse (``upload_slots.receive_upload``); ``BodyBounds`` applies it, with a size limit of
``MAX_JSON_BODY_BYTES`` (413), to every other request before its route runs. Before, a JSON route read
whatever a client sent: a 1 GB body to ``/v1/auth/token`` was held in memory, a trickled one held a connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection
from typing import Any

from ingestion_pipeline.api.errors import ApiError

MAX_JSON_BODY_BYTES = 1024 * 1024  # the largest JSON body a route takes (a source's settings) is a few KiB
CLOSE = {"Connection": "close"}


async def paced_body(chunks: AsyncIterator[bytes], *, idle_seconds: float, min_bytes_per_second: float,
                     code: str = "upload_too_slow", what: str = "upload") -> AsyncIterator[bytes]:
    """``chunks`` as they arrive, ended with 408 ``code`` when the client stalls or trickles (module docstring)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    received = 0
    iterator = chunks.__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(iterator.__anext__(), timeout=idle_seconds)
        except StopAsyncIteration:
            return
        except TimeoutError as exc:
            raise ApiError(408, code, f"no byte of the {what} arrived for {idle_seconds:g} s "
                           f"({received:,} bytes received); the {what} is dropped", CLOSE) from exc
        received += len(chunk)
        elapsed = loop.time() - started
        if elapsed > idle_seconds and received < min_bytes_per_second * elapsed:
            raise ApiError(408, code, f"the {what} arrived at {received / elapsed:,.0f} bytes/s, under "
                           f"the minimum of {min_bytes_per_second:,.0f}; the {what} is dropped", CLOSE)
        yield chunk


class _ClientLeft(Exception):
    pass


class BodyBounds:
    """ASGI middleware: every request but a streaming upload is read whole, within the bounds, before its route."""

    def __init__(self, app: Any, *, streaming: Collection[tuple[str, str]], idle_seconds: float,
                 min_bytes_per_second: float, max_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        self.app, self.streaming, self.max_bytes = app, frozenset(streaming), max_bytes
        self.idle_seconds, self.min_bytes_per_second = idle_seconds, min_bytes_per_second

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in self.streaming:
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
        except ApiError as exc:
            await _answer(send, exc)
            return
        except _ClientLeft:
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, scope: dict, receive: Any) -> bytes:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise _too_large(f"the body is {int(declared):,} bytes")
        parts: list[bytes] = []
        size = 0
        async for chunk in paced_body(_messages(receive), idle_seconds=self.idle_seconds,
                                      min_bytes_per_second=self.min_bytes_per_second,
                                      code="body_too_slow", what="request body"):
            size += len(chunk)
            if size > self.max_bytes:
                raise _too_large(f"the body exceeds {self.max_bytes:,} bytes")
            parts.append(chunk)
        return b"".join(parts)


async def _messages(receive: Any) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientLeft
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def _too_large(what: str) -> ApiError:
    return ApiError(413, "too_large", f"{what}, over the {MAX_JSON_BODY_BYTES:,} byte limit of a request that is not "
                    "an upload", CLOSE)


async def _answer(send: Any, exc: ApiError) -> None:
    body = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
