"""Where a step's stdout and stderr go: the instance's compute log manager (``dagster_home/dagster.yaml``,
``compute_logs``).

Dagster's default, ``LocalComputeLogManager``, keeps each step's output in files under ``$DAGSTER_HOME/storage``
(the UI shows them on the step) and mirrors them back to the process's own stdout and stderr by starting a
``tail -F`` and a Python watcher for each stream: four processes a step, their starts in the step's time and CPU,
on every step of every run (a small file's run has eight; a Celery revision eleven; benchmarks/big_documents.py
--celery-polls measures it). This is the same manager (the same files, the same reading for the UI) with the
mirror a thread of the step's own process (``core/output_mirror.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

from dagster import Field, Float, StringSource

from ingestion_pipeline.core.output_mirror import mirrored_to_file
from ingestion_pipeline.core.settings import instance_home
from ingestion_pipeline.runtime.dagster_internals import (
    STDERR_EXTENSION,
    STDOUT_EXTENSION,
    CapturedLogContext,
    LocalComputeLogManager,
)


class MirroredComputeLogManager(LocalComputeLogManager):
    """``LocalComputeLogManager`` whose captured output is copied back to the process's streams by a thread of
    the process instead of four subprocesses. ``base_dir`` defaults to ``$DAGSTER_HOME/storage``, Dagster's own
    default, so every host finds a step's output where Dagster would have put it."""

    @classmethod
    def config_type(cls) -> dict:
        return {"base_dir": Field(StringSource, is_required=False),
                "polling_timeout": Field(Float, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: dict) -> MirroredComputeLogManager:
        home = os.environ.get("DAGSTER_HOME") or str(instance_home())
        return cls(base_dir=config_value.get("base_dir") or os.path.join(home, "storage"),
                   polling_timeout=config_value.get("polling_timeout"), inst_data=inst_data)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[CapturedLogContext, None, None]:
        out = self.get_captured_local_path(log_key, STDOUT_EXTENSION)
        err = self.get_captured_local_path(log_key, STDERR_EXTENSION)
        with mirrored_to_file(sys.stdout, out), mirrored_to_file(sys.stderr, err):
            yield CapturedLogContext(log_key)
        # as Dagster's: the mark that the capture is complete (the UI stops waiting for more)
        with open(self.complete_artifact_path(log_key), "a"):
            pass
