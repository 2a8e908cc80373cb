"""`dev`: the Dagster UI and daemon on 127.0.0.1 with the project's instance."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit
from ingestion_pipeline.core.settings import project_root


def cmd_dev(args: argparse.Namespace) -> int:
    bootstrap()
    root = project_root()
    dagster = Path(sys.executable).parent / "dagster"
    argv = [str(dagster), "dev", "-w", str(root / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(args.port)]
    started = {"ui": f"http://127.0.0.1:{args.port}", "dagster_home": os.environ.get("DAGSTER_HOME"),
               "workspace": str(root / "workspace.yaml")}
    emit(args, [started], lambda rows: print(f"Dagster UI and daemon: {rows[0]['ui']} "
                                              f"(DAGSTER_HOME={rows[0]['dagster_home']}); Ctrl-C stops both"))
    sys.stdout.flush()  # execv replaces this process: nothing buffered would be printed
    os.chdir(root)
    os.execv(argv[0], argv)
    return 0  # not reached


def register(sub) -> None:
    """Add `dev` to the top-level subparsers."""
    p = sub.add_parser("dev", help="Dagster UI + daemon with sensors on (127.0.0.1)")
    p.add_argument("--port", type=int, default=3000)
    add_json_flag(p)
    p.set_defaults(func=cmd_dev)
