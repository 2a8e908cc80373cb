"""Progress of long work, reported at most every ``INGESTION_PROGRESS_SECONDS`` (2) seconds.

A document step creates one ``Progress`` (files done of total, chunks, rate, ETA; the embed step's ETA follows
the model's tokens, what its time follows: it encodes the shortest chunks first, so an ETA by chunks grew as
the chunks did); metric staging one
``RowProgress`` (rows, rows/s, bytes read of the file, ETA from the bytes: the row count is known only
at the end). Each report goes to the ``ingestion_pipeline.progress`` logger (with the figures as
``record.progress``) and to any extra sink (a Dagster step passes its run log).
``install_terminal_reporter`` makes the CLI show them: one line rewritten in place on a terminal, one
JSON object per report otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TextIO

_log = logging.getLogger("ingestion_pipeline.progress")

Sink = Callable[[str], None]


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def default_interval() -> float:
    return float(os.environ.get("INGESTION_PROGRESS_SECONDS", "2"))


class _Reporter:
    """Throttled reports of ``snapshot()`` / ``describe()`` to the progress logger and the sinks."""

    def __init__(self, sinks: Iterable[Sink], interval: float | None, clock: Callable[[], float]) -> None:
        self._sinks = list(sinks)
        self._interval = default_interval() if interval is None else interval
        self._clock = clock
        self._started = clock()
        self._last_report = self._started

    def snapshot(self, now: float | None = None) -> dict:
        raise NotImplementedError

    def describe(self, snapshot: dict | None = None) -> str:
        raise NotImplementedError

    def _pace(self, now: float | None, done: float, left: float) -> tuple[float, float, float | None]:
        """Seconds elapsed, ``done`` per second, and the ETA of ``left`` at that rate (rounded; None: no rate yet)."""
        now = self._clock() if now is None else now
        elapsed = max(now - self._started, 1e-9)
        rate = done / elapsed
        eta = 0.0 if left <= 0 else (round(left / rate, 1) if rate > 0 else None)
        return elapsed, rate, eta

    def _maybe_report(self) -> None:
        now = self._clock()
        if now - self._last_report >= self._interval:
            self._report(now)

    def finish(self) -> None:
        self._report(self._clock(), final=True)

    def _report(self, now: float, final: bool = False) -> None:
        self._last_report = now
        snapshot = {**self.snapshot(now), "final": final}
        message = self.describe(snapshot)
        _log.info(message, extra={"progress": snapshot})
        for sink in self._sinks:
            sink(message)


class Progress(_Reporter):
    def __init__(self, step: str, total_files: int, *, total_chunks: int | None = None, sinks: Iterable[Sink] = (),
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sinks, interval, clock)
        self.step = step
        self.total_files = total_files
        self.total_chunks = total_chunks  # when known (embedding), the ETA follows chunks: files vary in size
        self.files_done = 0
        self.chunks = 0
        self.total_tokens: int | None = None  # tokens to encode, once known (``count_tokens``)
        self.tokens = 0
        self._tokens_from = self._started
        self._lock = threading.Lock()

    def count_tokens(self, total: int) -> None:
        """From now on the ETA follows ``total`` tokens (the model's time is per token, not per chunk)."""
        with self._lock:
            self.total_tokens, self.tokens, self._tokens_from = total, 0, self._clock()

    def advance(self, files: int = 0, chunks: int = 0, tokens: int = 0) -> None:
        with self._lock:  # a step may work on files in several lanes
            self.files_done += files
            self.chunks += chunks
            self.tokens += tokens
            self._maybe_report()

    def snapshot(self, now: float | None = None) -> dict:
        now = self._clock() if now is None else now
        elapsed = max(now - self._started, 1e-9)
        files_per_s = self.files_done / elapsed
        tokens_per_s = self.tokens / max(now - self._tokens_from, 1e-9)
        if self.total_tokens is not None:
            left, rate = self.total_tokens - self.tokens, tokens_per_s
        elif self.total_chunks is not None:
            left, rate = self.total_chunks - self.chunks, self.chunks / elapsed
        else:
            left, rate = self.total_files - self.files_done, files_per_s
        if self.files_done >= self.total_files:
            left = 0
        eta = left / rate if rate > 0 and left > 0 else (0.0 if left <= 0 else None)
        return {"step": self.step, "files_done": self.files_done, "files_total": self.total_files,
                "chunks": self.chunks, "chunks_total": self.total_chunks,
                "elapsed_s": round(elapsed, 1), "files_per_s": round(files_per_s, 2),
                "chunks_per_s": round(self.chunks / elapsed, 1), "tokens": self.tokens,
                "tokens_total": self.total_tokens, "tokens_per_s": round(tokens_per_s),
                "eta_s": None if eta is None else round(eta, 1)}

    def describe(self, snapshot: dict | None = None) -> str:
        s = snapshot or self.snapshot()
        eta = "?" if s["eta_s"] is None else _duration(s["eta_s"])
        of = f"/{s['chunks_total']:,}" if s.get("chunks_total") is not None else ""
        chunks = f", {s['chunks']:,}{of} chunks ({s['chunks_per_s']:.1f}/s)" if s["chunks"] or of else ""
        if s.get("tokens_total") is not None:
            chunks += f", {s['tokens']:,}/{s['tokens_total']:,} tokens ({s['tokens_per_s']:,}/s)"
        return (f"{s['step']}: {s['files_done']}/{s['files_total']} files{chunks}, "
                f"{s['files_per_s']:.2f} files/s, elapsed {_duration(s['elapsed_s'])}, ETA {eta}")


class UnitProgress(_Reporter):
    """Units of one big document (page ranges read side by side); the ETA follows pages read this attempt."""

    def __init__(self, step: str, total_units: int, total_pages: int, *, sinks: Iterable[Sink] = (),
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sinks, interval, clock)
        self.step = step
        self.total_units, self.total_pages = total_units, total_pages
        self.units_done = self.pages_done = 0
        self.pages_read = 0  # by this attempt (units done before are not part of its rate)
        self._lock = threading.Lock()

    def advance(self, units: int, pages: int, *, read: bool = True) -> None:
        with self._lock:  # units finish on several lanes
            self.units_done += units
            self.pages_done += pages
            self.pages_read += pages if read else 0
            self._maybe_report()

    def snapshot(self, now: float | None = None) -> dict:
        elapsed, rate, eta = self._pace(now, self.pages_read, self.total_pages - self.pages_done)
        return {"step": self.step, "units_done": self.units_done, "units_total": self.total_units,
                "pages_done": self.pages_done, "pages_total": self.total_pages, "pages_per_s": round(rate, 2),
                "elapsed_s": round(elapsed, 1), "eta_s": eta}

    def describe(self, snapshot: dict | None = None) -> str:
        s = snapshot or self.snapshot()
        eta = "?" if s["eta_s"] is None else _duration(s["eta_s"])
        return (f"{s['step']}: {s['units_done']}/{s['units_total']} units, {s['pages_done']}/{s['pages_total']} "
                f"pages ({s['pages_per_s']:.2f} pages/s), elapsed {_duration(s['elapsed_s'])}, ETA {eta}")


class RowProgress(_Reporter):
    """Rows of one streamed file; the ETA follows the bytes read of ``total_bytes``."""

    def __init__(self, step: str, total_bytes: int, *, sinks: Iterable[Sink] = (), interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sinks, interval, clock)
        self.step = step
        self.total_bytes = max(total_bytes, 0)
        self.rows = 0
        self.bytes_read = 0

    def advance(self, rows: int, bytes_read: int) -> None:
        """``rows`` more rows done; ``bytes_read``: the position reached in the file (never goes back)."""
        self.rows += rows
        self.bytes_read = max(self.bytes_read, min(bytes_read, self.total_bytes))
        self._maybe_report()

    def snapshot(self, now: float | None = None) -> dict:
        now = self._clock() if now is None else now
        elapsed = max(now - self._started, 1e-9)
        left = self.total_bytes - self.bytes_read
        eta = 0.0 if left <= 0 else (left / (self.bytes_read / elapsed) if self.bytes_read else None)
        return {"step": self.step, "rows": self.rows, "rows_per_s": round(self.rows / elapsed),
                "bytes_read": self.bytes_read, "bytes_total": self.total_bytes, "elapsed_s": round(elapsed, 1),
                "eta_s": None if eta is None else round(eta, 1)}

    def describe(self, snapshot: dict | None = None) -> str:
        s = snapshot or self.snapshot()
        eta = "?" if s["eta_s"] is None else _duration(s["eta_s"])
        share = s["bytes_read"] / s["bytes_total"] if s["bytes_total"] else 1.0
        return (f"{s['step']}: {s['rows']:,} rows ({s['rows_per_s']:,}/s), {s['bytes_read'] / 1e6:.0f} of "
                f"{s['bytes_total'] / 1e6:.0f} MB read ({share:.0%}), elapsed {_duration(s['elapsed_s'])}, ETA {eta}")


class _TerminalReporter(logging.Handler):
    """On a terminal: one status line, rewritten; a step's final report stays. Elsewhere: JSON lines."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.tty = stream.isatty()

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if progress is None:
            return
        if self.tty:
            end = "\n" if progress.get("final") else ""
            self.stream.write("\r\x1b[2K" + record.getMessage() + end)
        else:
            self.stream.write(json.dumps({"event": "progress", **progress}) + "\n")
        self.stream.flush()


def install_terminal_reporter(stream: TextIO | None = None) -> logging.Handler:
    """Show progress reports on ``stream`` (stderr); returns the handler (remove it to stop)."""
    handler = _TerminalReporter(stream or sys.stderr)
    _log.addHandler(handler)
    _log.setLevel(logging.INFO)
    _log.propagate = False
    return handler


class CountProgress(_Reporter):
    """A count of like things done of a known total (vectors indexed): rate and ETA by that count."""

    def __init__(self, step: str, total: int, unit: str, *, sinks: Iterable[Sink] = (),
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sinks, interval, clock)
        self.step, self.total, self.unit = step, total, unit
        self.done = 0
        self._lock = threading.Lock()

    def advance(self, count: int) -> None:
        with self._lock:  # counted on several lanes
            self.done += count
            self._maybe_report()

    def snapshot(self, now: float | None = None) -> dict:
        elapsed, rate, eta = self._pace(now, self.done, self.total - self.done)
        return {"step": self.step, "done": self.done, "total": self.total, "unit": self.unit,
                "per_s": round(rate, 1), "elapsed_s": round(elapsed, 1), "eta_s": eta}

    def describe(self, snapshot: dict | None = None) -> str:
        s = snapshot or self.snapshot()
        eta = "?" if s["eta_s"] is None else _duration(s["eta_s"])
        return (f"{s['step']}: {s['done']:,}/{s['total']:,} {s['unit']} ({s['per_s']:,.0f}/s), "
                f"elapsed {_duration(s['elapsed_s'])}, ETA {eta}")
