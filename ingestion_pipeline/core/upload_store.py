"""The raw store for uploaded bytes, content-addressed by SHA-256: a local folder (this module, the embedded
default) or an S3 bucket (``core/s3_upload_store``, ``INGESTION_UPLOAD_STORE=s3://bucket/prefix``).

Bytes are written to a temporary file in the store while their hash is computed, then renamed to
``<tenant>/<sha256>`` (atomic on one filesystem). The same bytes for the same tenant share one stored
copy; ``release`` removes it once nothing refers to it.

Both stores answer the same calls (``UploadStore``); a stored file's *location* (the ledger's ``raw_path``)
is a local path or an ``s3://`` URI. ``verify`` is the cheap check before work starts (it is there);
a worker reads the bytes through ``local_copy``, which checks their hash: the local store hands out the
file itself, the S3 store downloads it once (hashing on the way) into a scratch file.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ingestion_pipeline.core.failures import CodedError
from ingestion_pipeline.core.hashing import CHUNK_BYTES, SizeLimitExceeded, file_sha256

# ``reader``'s buffer: a first ``peek`` gives the first MiB of a file (or all of a smaller one)
READER_BUFFER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    path: Path | str  # the location: a local path, or an s3:// URI (S3UploadStore)
    sha256: str
    size: int
    created: bool  # False when identical bytes were already stored for the tenant


class StoredObjectMissing(CodedError):
    """The stored bytes a ledger row names are gone (removed by hand, a lifecycle rule): permanent."""

    def __init__(self, location: str) -> None:
        super().__init__("raw_missing", f"the stored file is missing ({location}); submit the file again",
                         suggestion="submit the file again; a replay needs its bytes")


class StoredObjectChanged(CodedError):
    """The stored bytes no longer hash to the SHA-256 they were stored under: permanent."""

    def __init__(self, location: str, found: str) -> None:
        super().__init__("raw_checksum_mismatch",
                         f"the stored file {location} does not match its SHA-256 (it hashes to {found[:12]}…: "
                         "changed or corrupted in storage); submit the file again")


@dataclass(frozen=True)
class LocalCopy:
    """Stored bytes as a local file a reader opens; ``fetched_bytes`` is what was downloaded for it (0: local)."""

    path: Path
    fetched_bytes: int


class Incoming(Protocol):
    size: int

    def write(self, piece: bytes) -> None: ...
    def commit(self) -> StoredFile: ...
    def abort(self) -> None: ...


class UploadStore(Protocol):
    """What every upload store does (the contract tests run against each)."""

    def incoming(self, tenant_id: str, *, max_bytes: int | None = None) -> Incoming: ...
    def put(self, tenant_id: str, stream: BinaryIO, *, max_bytes: int | None = None) -> StoredFile: ...
    def owns(self, location: str | Path) -> bool: ...
    def exists(self, location: str | Path) -> bool: ...
    def verify(self, location: str | Path, sha256: str) -> None: ...
    def local_copy(self, location: str | Path, sha256: str | None): ...  # a context manager of LocalCopy
    def reader(self, location: str | Path): ...  # a context manager of an io.BufferedReader, bytes unchecked
    def release(self, location: str | Path) -> int: ...
    def stale(self, older_than_seconds: float) -> list[str]: ...
    def put_view(self, tenant_id: str, sha256: str, name: str, data: bytes) -> None: ...
    def get_view(self, tenant_id: str, sha256: str, name: str) -> bytes | None: ...


class IncomingFile:
    """Bytes arriving piece by piece (an HTTP body, an S3 stream): hashed as they are written to a
    temporary file in the store; ``commit`` renames it to its content address, ``abort`` removes it."""

    def __init__(self, tenant_dir: Path, max_bytes: int | None) -> None:
        self._tenant_dir = tenant_dir
        self._max_bytes = max_bytes
        self._digest = hashlib.sha256()
        self.size = 0
        fd, self._tmp_name = tempfile.mkstemp(dir=tenant_dir, prefix=".incoming-")
        self._file = os.fdopen(fd, "wb")

    def write(self, piece: bytes) -> None:
        self.size += len(piece)
        if self._max_bytes is not None and self.size > self._max_bytes:
            raise SizeLimitExceeded(self._max_bytes)
        self._digest.update(piece)
        self._file.write(piece)

    def commit(self) -> StoredFile:
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            sha = self._digest.hexdigest()
            final = self._tenant_dir / sha
            created = not final.exists()
            os.replace(self._tmp_name, final)
        except BaseException:
            self.abort()
            raise
        return StoredFile(path=final, sha256=sha, size=self.size, created=created)

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        Path(self._tmp_name).unlink(missing_ok=True)


def write_all(incoming: Incoming, stream: BinaryIO) -> StoredFile:
    """Every piece of ``stream`` into ``incoming``, then commit; on any error (a size limit) nothing is left."""
    try:
        while piece := stream.read(CHUNK_BYTES):
            incoming.write(piece)
    except BaseException:
        incoming.abort()
        raise
    return incoming.commit()


class LocalUploadStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalUploadStore({self.root})"

    def incoming(self, tenant_id: str, *, max_bytes: int | None = None) -> IncomingFile:
        """A file to write into piece by piece; a size-limit breach raises ``SizeLimitExceeded``."""
        tenant_dir = self.root / tenant_id
        tenant_dir.mkdir(parents=True, exist_ok=True)
        return IncomingFile(tenant_dir, max_bytes)

    def put(self, tenant_id: str, stream: BinaryIO, *, max_bytes: int | None = None) -> StoredFile:
        """Stream into the store; a size-limit breach leaves nothing behind."""
        return write_all(self.incoming(tenant_id, max_bytes=max_bytes), stream)

    def owns(self, location: str | Path) -> bool:
        return not str(location).startswith("s3://") and Path(location).is_relative_to(self.root)

    def exists(self, location: str | Path) -> bool:
        return Path(location).is_file()

    def verify(self, location: str | Path, sha256: str) -> None:
        """Cheap, before work starts: the file is there (``local_copy`` checks its hash when it is read)."""
        if not Path(location).is_file():
            raise StoredObjectMissing(str(location))

    @contextmanager
    def local_copy(self, location: str | Path, sha256: str | None) -> Iterator[LocalCopy]:
        """The stored file itself, once its bytes are checked against ``sha256`` (None: just stored, not checked)."""
        if not Path(location).is_file():
            raise StoredObjectMissing(str(location))
        found = file_sha256(Path(location)) if sha256 is not None else None
        if found != sha256:
            raise StoredObjectChanged(str(location), found)
        yield LocalCopy(Path(location), 0)

    @contextmanager
    def reader(self, location: str | Path) -> Iterator[io.BufferedReader]:
        """The stored file, open for reading, unchecked: a look at the start of a file just stored."""
        try:
            stream = open(location, "rb", buffering=READER_BUFFER_BYTES)  # noqa: SIM115 - closed by the with below
        except FileNotFoundError as exc:
            raise StoredObjectMissing(str(location)) from exc
        with stream:
            yield stream

    def release(self, location: str | Path) -> int:
        """Remove the stored file; returns the bytes freed (0 when it was already gone)."""
        try:
            size = Path(location).stat().st_size
            Path(location).unlink()
        except FileNotFoundError:
            return 0
        return size

    def put_view(self, tenant_id: str, sha256: str, name: str, data: bytes) -> None:
        """Keep ``data`` as the view ``name`` of the tenant's file ``sha256`` (written whole, then renamed)."""
        path = _view_path(self.root, tenant_id, sha256, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_bytes(data)
        partial.replace(path)

    def get_view(self, tenant_id: str, sha256: str, name: str) -> bytes | None:
        try:
            return _view_path(self.root, tenant_id, sha256, name).read_bytes()
        except FileNotFoundError:
            return None

    def stale(self, older_than_seconds: float) -> list[str]:
        """Stored files (and half-written ``.incoming-*``) last written longer ago than that."""
        cutoff = time.time() - older_than_seconds
        if not self.root.is_dir():
            return []
        return [str(p) for p in self.root.glob("*/*") if p.is_file() and p.stat().st_mtime < cutoff]


# What is made of a stored file for people to see (its pages' images and layouts: documents/page_views.py), kept
# apart from the files themselves: never counted stale, never released with the file.
VIEWS = ".views"


def view_name_ok(name: str) -> bool:
    """A view's name is one plain file name (``12.jpg``): never a path."""
    return bool(name) and len(name) <= 64 and all(c.isalnum() or c in "._-" for c in name) and not name.startswith(".")


def _view_path(root: Path, tenant_id: str, sha256: str, name: str) -> Path:
    if not view_name_ok(name) or not view_name_ok(sha256) or not view_name_ok(tenant_id):
        raise ValueError(f"not a view's name: {tenant_id!r}/{sha256!r}/{name!r}")
    return root / VIEWS / tenant_id / sha256 / name


def stored_in(location: str | Path | None) -> LocalUploadStore:
    """The local store a stored file's path belongs to (``<root>/<tenant>/<sha256>``): for callers given no store."""
    return LocalUploadStore(Path(location or ".").parent.parent)


class RefusedPath(Exception):
    """A submitted path is not read: a symbolic link on the way, or not a regular file."""


class SymlinkRefused(RefusedPath):
    """A submitted path has a symbolic link in it (any component) and following links was not asked for."""


class NotARegularFile(RefusedPath):
    """A submitted path is a FIFO, a device, a socket or a directory: reading it could block or never end."""


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def open_submitted_file(path: Path, *, follow_symlinks: bool = False) -> BinaryIO:
    """Open a regular file a person submitted; refuse a symbolic link anywhere on its path unless asked.

    Each directory is opened relative to the one before with ``O_NOFOLLOW`` (``openat``), so a link in any
    component is refused, and one swapped in after a check is refused too. The file is opened non-blocking and
    checked with ``fstat`` before a byte is read: a FIFO named ``.txt`` would otherwise block forever.
    """
    path = Path(path)
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    parts = path.parts
    if not parts:
        raise NotARegularFile("an empty path is not a file")
    directory = os.open(parts[0] if path.is_absolute() else ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts[1:-1] if path.is_absolute() else parts[:-1]):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and not follow_symlinks:
                    where = Path(*parts[:index + (2 if path.is_absolute() else 1)])
                    if where.is_symlink():
                        raise SymlinkRefused(
                            f"{where} is a symbolic link (to {os.readlink(where)}) on the way to {path.name}; pass "
                            "--follow-symlinks to read what it points to") from exc
                raise
            os.close(directory)
            directory = inner
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | nofollow, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP and not follow_symlinks:
                target = os.readlink(path) if path.is_symlink() else "?"
                raise SymlinkRefused(f"{path.name} is a symbolic link (to {target}); pass --follow-symlinks to "
                                     "read what it points to") from exc
            raise
    finally:
        os.close(directory)
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind != stat.S_IFREG:
        os.close(fd)
        raise NotARegularFile(f"{path.name} is {_KINDS.get(kind, 'not a regular file')}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
