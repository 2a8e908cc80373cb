"""Where a Redis job's file goes when the job ends: ``processed/`` on success, ``failed/`` with
``<filename>.error.json`` (the failure record) on failure, beside the file's ``incoming/`` folder (or in its
own folder when it is not in one called ``incoming``).

The pipeline read the file into the upload store when the job was accepted, so moving it afterwards loses
nothing. A name already taken in the destination gets the job id added; a file already moved (a second
job for the same path, a sync repeated after a crash) is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def destination_folder(source: Path, status: str) -> Path:
    folder = "processed" if status == "done" else "failed"
    base = source.parent.parent if source.parent.name == "incoming" else source.parent
    return base / folder


def settle(source_path: str | None, status: str, job_id: str, failure: dict | None = None) -> Path | None:
    """Move the job's file to its folder (and write the failure record); the new path, or None if the file
    is no longer where the job found it."""
    if not source_path:
        return None
    source = Path(source_path)
    if not source.is_file() or source.is_symlink():
        return None
    folder = destination_folder(source, status)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    if target.exists():
        target = folder / f"{source.stem}.{job_id}{source.suffix}"
    try:
        os.replace(source, target)
    except OSError:  # another file system
        shutil.move(source, target)
    if failure is not None:
        record = target.with_name(target.name + ".error.json")
        record.write_text(json.dumps(failure, indent=2, sort_keys=True) + "\n")
    return target
