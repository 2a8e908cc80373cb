"""Where a Redis job's file goes when the job ends: ``processed/`` on success, ``failed/`` with
``<filename>.error.json`` (the failure record) on failure, beside the file's ``incoming/`` folder (or in its
own folder when it is not in one called ``incoming``). The pipeline read the file into the upload store when
the job was accepted, so moving it afterwards loses nothing. A name already taken in the destination gets
the job id added; a file already moved (a second job for the same path, a sync repeated after a crash) is
left alone. No step follows a link: a ``processed/`` or ``failed/`` that is one leaves the file where it is
(logged), and a failure record planted as a link is replaced, never written through.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

_log = logging.getLogger(__name__)


def destination_folder(source: Path, status: str) -> Path:
    folder = "processed" if status == "done" else "failed"
    base = source.parent.parent if source.parent.name == "incoming" else source.parent
    return base / folder


def settle(source_path: str | None, status: str, job_id: str, failure: dict | None = None) -> Path | None:
    """Move the job's file to its folder (and write the failure record); the new path, or None if the file
    is no longer where the job found it, or its move would follow a link (logged: the file stays).

    Every step works relative to a descriptor of the folder it is in and follows no link: a consumer often
    runs as root, and a ``failed/`` that is a link, or a ``<name>.error.json`` planted as one, must not
    move or write anything outside the rag's folder."""
    if not source_path:
        return None
    source = Path(source_path)
    folder = destination_folder(source, status)
    try:
        with _folder(source.parent) as source_dir, _folder(folder.parent) as base_dir:
            try:
                found = os.stat(source.name, dir_fd=source_dir, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(found.st_mode):
                return None  # a link or anything else: not the file the job read
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder.name, mode=0o755, dir_fd=base_dir)
            with _folder(Path(folder.name), dir_fd=base_dir) as target_dir:
                name = source.name
                if _exists(name, target_dir):
                    name = f"{source.stem}.{job_id}{source.suffix}"
                    if _exists(name, target_dir):
                        name = f"{source.stem}.{job_id}.{secrets.token_hex(4)}{source.suffix}"
                _move(source.name, source_dir, name, target_dir)
                if failure is not None:
                    _write_new(name + ".error.json", target_dir,
                               (json.dumps(failure, indent=2, sort_keys=True) + "\n").encode())
                return folder / name
    except _LinkRefused as exc:
        _log.warning("job %s: its file stays where it is: %s", job_id, exc)
        return None


class _LinkRefused(OSError):
    """A folder on the way is a link (or not a folder): nothing is moved through it."""


@contextlib.contextmanager
def _folder(path: Path, *, dir_fd: int | None = None) -> Iterator[int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _LinkRefused(f"{path} is a link or not a folder") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _move(name: str, source_dir: int, target: str, target_dir: int) -> None:
    try:
        os.rename(name, target, src_dir_fd=source_dir, dst_dir_fd=target_dir)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # another file system: copied through descriptors that follow no link, then the source removed
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=source_dir)
        try:
            with os.fdopen(src, "rb", closefd=False) as reader:
                _write_new(target, target_dir, reader)
        finally:
            os.close(src)
        os.unlink(name, dir_fd=source_dir)


def _write_new(name: str, dir_fd: int, content) -> None:
    """Write ``name`` in the folder of ``dir_fd`` through a new file (``O_EXCL``: never an existing file or
    link), then rename it into place: a link already at ``name`` is replaced, never written through."""
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(content, bytes):
                out.write(content)
            else:
                shutil.copyfileobj(content, out)
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
