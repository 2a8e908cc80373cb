"""A process's stdout or stderr written into a file and still shown where it went before, without a subprocess.

What a Dagster step prints is kept in a file per step (the UI's stdout/stderr of the step) and shown on the terminal
or log of the process that ran it. Dagster's own way starts four processes a step for that (a ``tail -F`` and a Python
watcher for each stream: their starts and CPU on every step of every run, where a small file's run has eight steps;
docs/benchmarks.md, "What each Celery step set up again") and can drop the end of the output (``tail`` looks once a
second and is stopped when the step ends). Here the stream's file descriptor points at the file, as Dagster's does,
and a thread of this process copies what the file gains to the stream's former destination: the last output is copied
before the capture ends, and a process that dies takes its copier with it (nothing to orphan).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import IO

MIRROR_INTERVAL_SECONDS = 0.1  # how soon printed output shows where it went before
_JOIN_SECONDS = 2.0  # at the end, how long the copier may take to write the rest where the output went


def _fileno(stream: IO | None) -> int | None:
    try:
        fd = stream.fileno() if stream is not None else None
    except (AttributeError, OSError, ValueError):  # a test runner's stand-in stream has no descriptor
        return None
    return fd if isinstance(fd, int) else None


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


@contextlib.contextmanager
def mirrored_to_file(stream: IO, path: str | os.PathLike, interval: float = MIRROR_INTERVAL_SECONDS) -> Iterator[None]:
    """While inside, what this process (and a child it starts) writes to ``stream``'s descriptor is appended to
    ``path`` and copied, within ``interval`` seconds, to where ``stream`` wrote before. A stream without a
    descriptor is left alone (nothing is captured, as with Dagster's capture)."""
    fd = _fileno(stream)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "ab"):
        pass  # exists, even when nothing is written (the UI reads it)
    try:
        if fd is None:
            raise OSError("no descriptor")
        stream.flush()
        before = os.dup(fd)  # where the output went: the copier writes there
    except (OSError, ValueError):  # none, or one already closed (a daemonised process): nothing to capture
        yield
        return
    start = os.path.getsize(path)
    stop = threading.Event()
    failed: list[OSError] = []

    def copy() -> None:
        with open(path, "rb") as captured:
            captured.seek(start)
            while True:
                last = stop.wait(interval)
                try:
                    while data := captured.read(1 << 16):
                        _write_all(before, data)
                except OSError as error:  # the destination closed (a reader gone): the file still has it all
                    failed.append(error)
                    return
                if last:
                    return

    copier = threading.Thread(target=copy, name=f"output-mirror-{fd}", daemon=True)
    with open(path, "ab", buffering=0) as into:
        os.dup2(into.fileno(), fd)
    copier.start()
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
        os.dup2(before, fd)
        stop.set()
        copier.join(_JOIN_SECONDS)
        if not copier.is_alive():  # else it is still writing to a slow reader: its descriptor stays open for it
            os.close(before)
