"""Where a Redis job's file goes when the job ends: ``processed/`` on success, ``failed/`` with
``<filename>.error.json`` (the failure record) on failure, beside the file's ``incoming/`` folder (or in its
own folder when it is not in one called ``incoming``; never above the rag's root). The pipeline read the file
into the upload store when the job was accepted, so moving it afterwards loses nothing. A name already taken in
the destination gets the job id added; a file already moved (a second job for the same path, a sync repeated
after a crash) is left alone.

Guarantee: nothing is moved or written outside the rag's registered root, nor through any link inside it. The
consumer often runs as root, and whoever can write in a rag's folder can replace any folder on a queued job's
path with a link before the job ends. So the path is opened from the root one folder at a time, each relative
to the descriptor of the one before and none followed if it is a link; a path with ``..``, one not under the
root, an unknown root, or a link anywhere on the way (a folder, ``processed/``, ``failed/``, the file) leaves
the file where it is (logged). Everything after the walk works on the descriptors it opened, so a link swapped
in meanwhile is never reached; a failure record planted as a link is replaced, never written through.
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


def settle(source_path: str | None, status: str, job_id: str, failure: dict | None = None, *,
           root: str | Path | None) -> Path | None:
    """Move the job's file to its folder (and write the failure record); the new path, or None if the file
    is no longer where the job found it, or its move is refused (logged: the file stays). ``root``: the job's
    rag's root as registered (its real path); None when it is not known, and then nothing moves."""
    if not source_path:
        return None
    try:
        folders, name = _under_root(source_path, root)
        with contextlib.ExitStack() as held:
            try:
                fds = _walk(held, Path(root), folders)
            except FileNotFoundError:
                return None  # a folder on the way is gone: so is the file the job read
            source_dir = fds[-1]
            # beside incoming/, which is never the root itself: a root called incoming keeps processed/ inside it
            beside = bool(folders) and folders[-1] == "incoming"
            base_dir, base = (fds[-2], folders[:-1]) if beside else (fds[-1], folders)
            try:
                found = os.stat(name, dir_fd=source_dir, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(found.st_mode):
                return None  # a link or anything else: not the file the job read
            folder = "processed" if status == "done" else "failed"
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, mode=0o755, dir_fd=base_dir)
            target_dir = held.enter_context(_folder(folder, dir_fd=base_dir, shown=Path(root, *base, folder)))
            source = Path(name)
            target = name
            if _exists(target, target_dir):
                target = f"{source.stem}.{job_id}{source.suffix}"
                if _exists(target, target_dir):
                    target = f"{source.stem}.{job_id}.{secrets.token_hex(4)}{source.suffix}"
            _move(name, source_dir, target, target_dir)
            if failure is not None:
                _write_new(target + ".error.json", target_dir,
                           (json.dumps(failure, indent=2, sort_keys=True) + "\n").encode())
            return Path(root, *base, folder, target)
    except _Refused as exc:
        _log.warning("job %s: its file stays where it is: %s", job_id, exc)
        return None
    except OSError as exc:  # e.g. a folder planted where the record goes: this job's problem, not the round's
        _log.warning("job %s: its file could not be settled (%s); it stays where the move left it", job_id, exc)
        return None


class _Refused(OSError):
    """The path is not plainly under the root, or a folder on the way is a link (or not a folder): nothing
    is moved through it."""


def _under_root(source_path: str, root: str | Path | None) -> tuple[tuple[str, ...], str]:
    """The folders from the root down to the file, and the file's name; refused unless ``source_path`` is
    under ``root`` as written. Compared as text, never resolved: resolving would follow the links the walk
    must refuse, and ``..`` could climb out of a folder that a link put somewhere else."""
    if root is None:
        raise _Refused(f"{source_path}: its rag's root is not known")
    source, root = Path(source_path), Path(root)
    if not (source.is_absolute() and root.is_absolute()) or "\x00" in source_path:
        raise _Refused(f"{source_path} or its rag's root {root} is not an absolute path")
    try:
        parts = source.relative_to(root).parts
    except ValueError:
        raise _Refused(f"{source_path} is not under its rag's root {root}") from None
    if not parts or ".." in parts:
        raise _Refused(f"{source_path} is not plainly under its rag's root {root}")
    # each part is one plain name (pathlib splits on '/', drops '.'): never absolute, so dir_fd always applies
    return parts[:-1], parts[-1]


def _walk(held: contextlib.ExitStack, root: Path, folders: tuple[str, ...]) -> list[int]:
    """Descriptors of the root and of each folder below it on the way to the file, each opened by name in the
    one before (held open by ``held``). The root's own folders above it are the operator's, trusted; the root
    itself and everything below it must not be a link."""
    fds = [held.enter_context(_folder(root))]
    for depth, name in enumerate(folders, 1):
        fds.append(held.enter_context(_folder(name, dir_fd=fds[-1], shown=root.joinpath(*folders[:depth]))))
    return fds


@contextlib.contextmanager
def _folder(path: str | Path, *, dir_fd: int | None = None, shown: Path | None = None) -> Iterator[int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Refused(f"{shown or path} is a link or not a folder") from None
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
