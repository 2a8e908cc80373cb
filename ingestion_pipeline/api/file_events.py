"""A tenant's files as they move, pushed to its open streams (``GET /v1/files/events``, the web app's live
ingestion history): one ``LISTEN file_events`` connection per API process (sql/053 notifies at each commit that
moves a file), each notice handed to the streams of the notice's tenant only."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import defaultdict

import psycopg

log = logging.getLogger("ingestion_pipeline.api")
CHANNEL = "file_events"
RECONNECT_SECONDS = 1.0
# a stream that falls this far behind (a client that stopped reading) loses notices, never the listener's memory
QUEUE_BOUND = 1000


class FileEvents:
    """Subscriptions per tenant, fed by one listening thread (started by the first subscriber)."""

    def __init__(self, database_url: str | None) -> None:
        self.url = database_url
        self._streams: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]]] = defaultdict(set)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.listening = threading.Event()  # set while the LISTEN connection is up

    def subscribe(self, tenant_id: str) -> asyncio.Queue:
        """A queue of the tenant's file ids as they move (``None``: notices may have been missed, read again)."""
        if self.url is None:
            raise RuntimeError("no database URL to listen on")
        queue: asyncio.Queue = asyncio.Queue(QUEUE_BOUND)
        with self._lock:
            self._streams[tenant_id].add((asyncio.get_running_loop(), queue))
            if self._thread is None:
                self._thread = threading.Thread(target=self._listen, name="file-events", daemon=True)
                self._thread.start()
        return queue

    def unsubscribe(self, tenant_id: str, queue: asyncio.Queue) -> None:
        with self._lock:
            streams = self._streams.get(tenant_id, set())
            streams.difference_update({entry for entry in streams if entry[1] is queue})
            if not streams:
                self._streams.pop(tenant_id, None)

    def _hand(self, tenant_id: str | None, file_id: int | None) -> None:
        with self._lock:
            targets = [entry for tenant, entries in self._streams.items() for entry in entries
                       if tenant_id is None or tenant == tenant_id]
        for loop, queue in targets:
            try:
                loop.call_soon_threadsafe(_offer, queue, file_id)
            except RuntimeError:  # its event loop has closed: the stream is gone
                with self._lock:
                    for streams in self._streams.values():
                        streams.discard((loop, queue))

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, application_name="api-file-events") as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    self._hand(None, None)  # anything moved while not listening: every stream reads again
                    while not self._stopping.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            tenant_id, file_id = _parse(notice.payload)
                            if tenant_id is not None:
                                self._hand(tenant_id, file_id)
            except Exception as exc:  # the database went away, or anything else: never the listener for good
                log.warning("file events: %s; listening again in %.0f s", exc, RECONNECT_SECONDS)
            self.listening.clear()
            self._stopping.wait(RECONNECT_SECONDS)

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)


def _offer(queue: asyncio.Queue, file_id: int | None) -> None:
    """A notice for a stream; one that fell ``QUEUE_BOUND`` behind drops what it has and reads everything again."""
    try:
        queue.put_nowait(file_id)
    except asyncio.QueueFull:
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)


def _parse(payload: str) -> tuple[str | None, int | None]:
    """The notice's tenant and file; (None, None) for one that is not ours."""
    try:
        body = json.loads(payload)
        tenant_id, file_id = body["tenant_id"], body["file_id"]
    except (ValueError, KeyError, TypeError):
        return None, None
    if not isinstance(tenant_id, str) or not isinstance(file_id, int):
        return None, None
    return tenant_id, file_id
