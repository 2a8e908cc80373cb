"""`code-server`, `daemon`, `webserver`: Dagster's own executables, started once the databases answer.

On a host of their own (docker-compose.yml, docs/deployment.md) Dagster's executables meet an unreachable
Postgres with their own errors: the daemon exits 1 with a traceback, the code server keeps serving a load error.
These commands check first, as every other command does: the application database answers and its schema is
current (else exit 3 / 4), and so does Dagster's storage (``DAGSTER_PG_URL``, exit 3). Then the process
becomes Dagster's executable (``exec``: same PID, signals go straight to it), with the project's instance
(``DAGSTER_HOME``) and code location. Arguments after ``--`` are passed on to it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ingestion_pipeline.core.settings import project_root

LOCATION = ["-m", "ingestion_pipeline.definitions", "--location-name", "ingestion_pipeline"]


def register(sub) -> None:
    """Add `code-server`, `daemon` and `webserver` to the top-level subparsers."""
    workspace_help = "the workspace file (default: the project's workspace.yaml, which loads the code in-process)"
    p = sub.add_parser("code-server", help="Dagster's code server for the project's definitions (gRPC)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4000, help="port to serve on (default 4000)")
    p.set_defaults(func=cmd_code_server)
    p = sub.add_parser("daemon", help="Dagster's daemon: sensors, schedules, the run queue, run retries")
    p.add_argument("-w", "--workspace", default=None, help=workspace_help)
    p.set_defaults(func=cmd_daemon)
    p = sub.add_parser("webserver", help="Dagster's UI")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=3000, help="port to serve on (default 3000)")
    p.add_argument("-w", "--workspace", default=None, help=workspace_help)
    p.set_defaults(func=cmd_webserver)
    for name in ("code-server", "daemon", "webserver"):
        sub.choices[name].add_argument("dagster_args", nargs=argparse.REMAINDER,
                                       help="after --: passed on to Dagster's executable")


def cmd_code_server(args: argparse.Namespace) -> int:
    return _exec(args, "dagster", ["code-server", "start", "-h", args.host, "-p", str(args.port), *LOCATION])


def cmd_daemon(args: argparse.Namespace) -> int:
    return _exec(args, "dagster-daemon", ["run", "-w", _workspace(args)])


def cmd_webserver(args: argparse.Namespace) -> int:
    return _exec(args, "dagster-webserver", ["-h", args.host, "-p", str(args.port), "-w", _workspace(args)])


def _workspace(args: argparse.Namespace) -> str:
    return str(Path(args.workspace).resolve()) if args.workspace else str(project_root() / "workspace.yaml")


def _exec(args: argparse.Namespace, executable: str, argv: list[str]) -> int:
    from ingestion_pipeline.cli.bootstrap import check_databases

    check_databases()
    extra = list(args.dagster_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    path = str(Path(sys.executable).parent / executable)
    print(f"{args.command}: the databases answer; starting {executable} (DAGSTER_HOME={os.environ['DAGSTER_HOME']})",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(path, [path, *argv, *extra])
    return 0  # not reached
