"""Extraction in a worker process, bounded in time and memory.

Parsers are C code (PDFium, libxml2) fed untrusted files: a file can make them run for hours or ask
for gigabytes, and a Python timeout cannot interrupt C. So the pipeline extracts in a separate
process (spawned once, reused file after file): the worker caps its own address space
(``INGESTION_EXTRACTION_MEMORY_MB``) and is killed when a file takes longer than
``INGESTION_EXTRACTION_TIMEOUT_SECONDS``. Either fails that one file with the reason; the next file
gets a fresh worker. A worker that dies for another reason (the kernel's OOM killer) is a transient
failure: the file is retried.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path

from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction import extract, extract_pdf_pages, load_extractors, pdf_survey
from ingestion_pipeline.documents.extraction.elements import ExtractedDocument, PdfPages, PdfSurvey, ReadPage
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.page_views import render_pages

_log = logging.getLogger("ingestion_pipeline.extraction")


def _peak_address_space() -> int:
    """This process's peak virtual memory in bytes (VmPeak), 0 if unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _serve(conn, memory_mb: int) -> None:
    """The worker: extract file after file until the pipe closes."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    load_extractors()  # while no file waits (a spare worker is started ahead of need)
    while True:
        try:
            task = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if task is None:
            return
        path, extension, limits, reusable_ocr, pages = task
        try:
            if isinstance(pages, tuple) and pages[0] == "survey":
                reply = ("ok", pdf_survey(Path(path), pages[1], pages[2], limits))
            elif isinstance(pages, tuple) and pages[0] == "render":
                reply = ("ok", render_pages(Path(path), pages[1], pages[2], ocr_words=pages[3]))
            elif pages is None:
                reply = ("ok", extract(Path(path), extension, limits, reusable_ocr))
            else:
                reply = ("ok", extract_pdf_pages(Path(path), *pages, reusable_ocr, limits.page_images))
        except MemoryError:
            reply = ("memory", None)
        except ExtractionError as exc:
            reply = ("error", (exc.code, str(exc), exc.suggestion))
        except Exception as exc:
            # C parsers report a failed allocation in their own words ("unknown error"): near the cap,
            # it was the memory limit; otherwise a parser bug, reported as such.
            near_cap = _peak_address_space() >= 0.9 * limit
            reply = ("memory", None) if near_cap else ("unexpected", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except MemoryError:
            conn.send(("memory", None))


def _spawn(memory_mb: int) -> tuple[subprocess.Popen, Connection]:
    ours, theirs = socket.socketpair()
    process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno()), str(memory_mb)],
                               pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
    theirs.close()
    return process, Connection(ours.detach())


# A worker started ahead of need, for the first extraction of this process (see start_spare_worker).
_spare: tuple[subprocess.Popen, Connection, int] | None = None
_spare_lock = threading.Lock()


def start_spare_worker(limits: ExtractionLimits) -> None:
    """Start a worker now for the first extraction of this process to take.

    A worker is a fresh interpreter, a large part of a one-file run before it answers (benchmarks/dev_latency.py).
    Started while the caller sets up Dagster, it is ready when the extraction step begins. Unused, it ends when
    this process does (its socket closes: EOF).
    """
    global _spare
    with _spare_lock:
        if _spare is None:
            _spare = (*_spawn(limits.memory_mb), limits.memory_mb)


def _take_spare(memory_mb: int) -> tuple[subprocess.Popen, Connection] | None:
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    process, conn, spare_memory_mb = spare
    if spare_memory_mb == memory_mb and process.poll() is None:
        return process, conn
    process.kill()  # started under other limits, or dead
    process.wait(10)
    conn.close()
    return None


class IsolatedExtractor:
    """``extract(path, extension)`` run in a bounded worker process (one at a time).

    The worker is a fresh interpreter (``python -m`` this module: no torch, no threads, nothing of the
    caller's ``__main__``) talking over a socket pair.
    """

    def __init__(self, limits: ExtractionLimits) -> None:
        self.limits = limits
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _start(self) -> None:
        self._process, self._conn = _take_spare(self.limits.memory_mb) or _spawn(self.limits.memory_mb)

    def _discard(self) -> None:
        if self._alive():
            self._process.kill()
        if self._process is not None:
            self._process.wait(10)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def __call__(self, path: Path, extension: str, reusable_ocr: Sequence[ReadPage] = (),
                 pages: tuple[int, int] | None = None) -> ExtractedDocument | PdfPages:
        """The whole file's document; or, with ``pages`` (first, last), that unit of a PDF (``PdfPages``).

        The earlier version's pages go to the worker without their words (a long scan's are megabytes, asked for
        every unit): a page's ``words`` of ``[]`` says it has them, and a reused page gets them back here."""
        reusable_ocr = list(reusable_ocr)
        light = [dataclasses.replace(p, words=None if p.words is None else []) for p in reusable_ocr]
        result = self._ask((str(path), extension, self.limits, light, pages))
        words = {(p.engine, p.image_sha256): p.words for p in reusable_ocr if p.words is not None}
        if words:
            read = result.read_pages if isinstance(result, PdfPages) else result.ocr_pages
            read[:] = [dataclasses.replace(p, words=words.get((p.engine, p.image_sha256), p.words)) if p.reused
                       else p for p in read]
        return result

    def survey(self, path: Path, look_beyond: int = 0, known_sources: Sequence[str] = ()) -> PdfSurvey:
        """A PDF's page count and pages to OCR (``pdf.pdf_survey``), looked up by the worker (PDFium parses the
        file: untrusted input) under this extractor's limits: a PDF over its page or OCR budget is refused."""
        return self._ask((str(path), ".pdf", self.limits, [], ("survey", look_beyond, list(known_sources))))

    def render(self, path: Path, first_page: int, last_page: int, ocr_words: Mapping | None = None) -> list:
        """Pages ``first_page``..``last_page`` of a PDF as images with their text's boxes
        (``page_views.render_pages``), made by the worker: PDFium renders untrusted input there."""
        return self._ask((str(path), ".pdf", self.limits, [], ("render", first_page, last_page, ocr_words)))

    def _ask(self, task: tuple):
        if not self._alive():
            self._discard()
            self._start()
        self._conn.send(task)
        if not self._conn.poll(self.limits.timeout_seconds):
            self._discard()
            raise ExtractionError(f"extraction took longer than {self.limits.timeout_seconds:g} s and was stopped",
                                  code="extraction_timeout")
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError) as exc:  # the worker died without answering
            code = self._process.poll() if self._process is not None else None
            self._discard()
            raise TransientError("worker_out_of_memory", f"the extraction worker died (exit code {code}); "
                                 "killed by the system, out of memory?") from exc
        if status == "ok":
            return value
        if status == "memory":
            self._discard()  # its heap may be fragmented: start clean
            raise ExtractionError(f"extracting the file needs more than {self.limits.memory_mb:,} MB of memory",
                                  code="extraction_memory_exceeded")
        if status == "error":
            code, message, suggestion = value
            raise ExtractionError(message, code=code, suggestion=suggestion)
        raise ExtractionError(f"the extractor failed: {value}", code="extraction_failed")

    def close(self) -> None:
        if self._conn is not None and self._alive():
            try:
                self._conn.send(None)
                self._process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._discard()

    def __enter__(self) -> IsolatedExtractor:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


class ExtractorPool:
    """Up to ``size`` bounded workers, one per caller at a time: the lanes of a step extract files, or units of
    one big file, side by side (each worker is a process of its own, so they use as many cores)."""

    def __init__(self, limits: ExtractionLimits, size: int) -> None:
        self.limits = limits
        self.size = max(1, size)
        self._idle: list[IsolatedExtractor] = []
        self._made = 0
        self._free = threading.Condition()

    def _borrow(self) -> IsolatedExtractor:
        with self._free:
            while not self._idle and self._made >= self.size:
                self._free.wait()
            if self._idle:
                return self._idle.pop()
            self._made += 1
        return IsolatedExtractor(self.limits)

    def _give_back(self, extractor: IsolatedExtractor) -> None:
        with self._free:
            self._idle.append(extractor)
            self._free.notify()

    def __call__(self, path: Path, extension: str, reusable_ocr: Sequence[ReadPage] = (),
                 pages: tuple[int, int] | None = None) -> ExtractedDocument | PdfPages:
        extractor = self._borrow()
        try:
            # a stand-in extractor of a test may not take ``pages``: only units pass it
            return extractor(path, extension, reusable_ocr) if pages is None else extractor(
                path, extension, reusable_ocr, pages)
        finally:
            self._give_back(extractor)

    def survey(self, path: Path, look_beyond: int = 0, known_sources: Sequence[str] = ()) -> PdfSurvey:
        extractor = self._borrow()
        try:
            return extractor.survey(path, look_beyond, known_sources)
        finally:
            self._give_back(extractor)

    def render(self, path: Path, first_page: int, last_page: int, ocr_words: Mapping | None = None) -> list:
        extractor = self._borrow()
        try:
            return extractor.render(path, first_page, last_page, ocr_words)
        finally:
            self._give_back(extractor)

    def close(self) -> None:
        with self._free:
            idle, self._idle = self._idle, []
        for extractor in idle:
            extractor.close()

    def __enter__(self) -> ExtractorPool:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
