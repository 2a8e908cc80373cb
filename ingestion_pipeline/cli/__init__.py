"""The `ingestion-pipeline` command: submit, process, inspect and search, without the Dagster daemon.

Every command uses DATABASE_URL when set, else the embedded Postgres under `.data/`; the Dagster
instance is the project's `dagster_home/dagster.yaml` (DAGSTER_HOME), so runs started here show
in the UI of `make dev`. One module per command group; each adds its subcommands in ``register``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

import psycopg
from psycopg_pool import PoolTimeout

from ingestion_pipeline.cli import (
    api,
    dagster_services,
    db,
    dev,
    documents,
    intake,
    ledger,
    metrics,
    model,
    queues,
    search_quality,
    sources,
    worker,
)
from ingestion_pipeline.cli.output import EscapingWriter
from ingestion_pipeline.core.embedded_postgres import DataFolderFromAnotherVersion
from ingestion_pipeline.core.migrations import SchemaOutOfDate
from ingestion_pipeline.documents.devices import CudaUnavailable
from ingestion_pipeline.documents.model_decision import EXIT_CODE as HOST_CANNOT_EMBED_EXIT
from ingestion_pipeline.documents.model_decision import HostCannotEmbed, RunHostCannotEmbed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingestion-pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (documents, search_quality, ledger, sources, metrics, queues, intake, api, dev, dagster_services,
                  db, worker, model):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; names and messages from users never reach the terminal raw (``EscapingWriter``)."""
    streams = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, EscapingWriter):
        sys.stdout, sys.stderr = EscapingWriter(sys.stdout), EscapingWriter(sys.stderr)
    try:
        return _main(argv)
    finally:  # a caller in the same process (a test, a script) gets its own streams back
        sys.stdout, sys.stderr = streams


def _main(argv: Sequence[str] | None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("ingestion_pipeline.ledger").setLevel(logging.INFO)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:  # bad input: say what is wrong, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (HostCannotEmbed, CudaUnavailable, RunHostCannotEmbed) as exc:  # a host cannot embed: say what to run
        print(f"error: {exc}\n{exc.suggestion}", file=sys.stderr)
        return HOST_CANNOT_EMBED_EXIT
    except (SchemaOutOfDate, DataFolderFromAnotherVersion) as exc:  # the database needs an operator's step first
        print(f"error: {exc}", file=sys.stderr)
        return 4
    except (psycopg.OperationalError, PoolTimeout) as exc:  # not the input's fault: say what to do
        print(f"error: the database is unavailable ({exc}); nothing was lost: run the command again once it "
              "is back (work in flight is handed back by the janitor)", file=sys.stderr)
        return 3


def run() -> None:
    """The `ingestion-pipeline` executable: ``main``, then an exit without the shutdown's garbage collections.

    After `process` the interpreter holds a great many objects (Dagster, the code location, the model's tokenizer),
    and its shutdown went through them in several full collections, on one core after the command had finished (perf:
    ``gc_collect_main``; benchmarks/compare_peers.py times whole commands). Frozen, they are left to the operating
    system, as the process's memory is; the command closed what it opened (pools, runs, files) before ``main``
    returned. ``main`` stays a plain function: tests call it in-process.
    """
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
