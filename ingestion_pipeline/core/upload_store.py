"""The raw store for uploaded bytes: a local folder, content-addressed by SHA-256.

Bytes are written to a temporary file in the store while their hash is computed, then renamed to
``<tenant>/<sha256>`` (atomic on one filesystem). The same bytes for the same tenant share one stored
copy; ``release`` removes it once nothing refers to it.
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ingestion_pipeline.core.hashing import copy_and_hash


@dataclass(frozen=True)
class StoredFile:
    path: Path
    sha256: str
    size: int
    created: bool  # False when identical bytes were already stored for the tenant


class LocalUploadStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def put(self, tenant_id: str, stream: BinaryIO, *, max_bytes: int | None = None) -> StoredFile:
        """Stream into the store; a size-limit breach leaves nothing behind."""
        tenant_dir = self.root / tenant_id
        tenant_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=tenant_dir, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as tmp:
                sha, size = copy_and_hash(stream, tmp, max_bytes=max_bytes)
                tmp.flush()
                os.fsync(tmp.fileno())
            final = tenant_dir / sha
            created = not final.exists()
            os.replace(tmp_name, final)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        return StoredFile(path=final, sha256=sha, size=size, created=created)

    def release(self, path: str | Path) -> None:
        Path(path).unlink(missing_ok=True)


class SymlinkRefused(Exception):
    """A submitted path is a symbolic link and following links was not asked for."""


def open_submitted_file(path: Path, *, follow_symlinks: bool = False) -> BinaryIO:
    """Open a file a person submitted, without following a symbolic link unless asked.

    ``O_NOFOLLOW`` makes the check and the open one step: a link swapped in after a check is refused too.
    """
    path = Path(path)
    flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            target = os.readlink(path) if path.is_symlink() else "?"
            raise SymlinkRefused(f"{path.name} is a symbolic link (to {target}); pass --follow-symlinks to read "
                                 "what it points to") from exc
        raise
    return os.fdopen(fd, "rb")
