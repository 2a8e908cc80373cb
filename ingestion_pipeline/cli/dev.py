"""`dev`: the Dagster UI and daemon, the intake service and the HTTP API, on 127.0.0.1 with the project's
instance."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit
from ingestion_pipeline.core.settings import project_root


def _start_api(port: int) -> dict:
    """The HTTP API next to the UI, in this process group (Ctrl-C reaches it too). Without JWT_SECRET it
    runs in development mode (AUTH_ENABLED=false, tenant from ?tenant_id=), bound to 127.0.0.1 only."""
    env = dict(os.environ)
    if not env.get("JWT_SECRET") and "AUTH_ENABLED" not in env:
        env["AUTH_ENABLED"] = "false"
    cli = Path(sys.executable).parent / "ingestion-pipeline"
    proc = subprocess.Popen([str(cli), "serve", "--host", "127.0.0.1", "--port", str(port)], env=env)
    auth = "off: pass ?tenant_id=" if env.get("AUTH_ENABLED", "").lower() == "false" else "bearer tokens"
    return {"api": f"http://127.0.0.1:{port}", "api_pid": proc.pid, "api_auth": auth}


def _start_intake() -> dict:
    """The intake service (Redis and SQS queues, S3 sources, the janitor) in this process group: the sensors
    only plan, so without it nothing arrives from a queue or a source."""
    cli = Path(sys.executable).parent / "ingestion-pipeline"
    proc = subprocess.Popen([str(cli), "intake"], env=dict(os.environ))
    return {"intake_pid": proc.pid}


def _start_redis() -> dict:
    """The Redis job queue for the sensors: REDIS_URL's server, or the project's own redis-server on 127.0.0.1:6379
    (``.data/redis``, AOF on; `make stop` ends it), when installed."""
    from ingestion_pipeline.core.redis_server import DEFAULT_REDIS_URL, RedisServerMissing, start_local_redis

    if os.environ.get("REDIS_URL"):
        return {"redis": os.environ["REDIS_URL"]}
    try:
        started = start_local_redis()
    except RedisServerMissing as exc:
        return {"redis": f"none ({exc})"}
    return {"redis": started or DEFAULT_REDIS_URL, "redis_started": started is not None}


def _embedding_precision() -> dict:
    """The deployment's model decision, made before the services start (`model prepare`: the export, and the
    precisions this CPU could run faster judged, the first time on a data folder only), so that no run or upload
    waits for it."""
    from ingestion_pipeline.documents.model_prepare import prepare

    print("Embedding model: `ingestion-pipeline model prepare` (the deployment's precision, decided once)",
          file=sys.stderr, flush=True)
    with bootstrap() as ctx:
        candidate = prepare(ctx.db, ctx.settings).decision.candidate
    return {"embedding_precision": candidate.precision, "embedding_runtime": candidate.runtime}


def cmd_dev(args: argparse.Namespace) -> int:
    bootstrap()
    root = project_root()
    dagster = Path(sys.executable).parent / "dagster"
    argv = [str(dagster), "dev", "-w", str(root / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(args.port)]
    started = {"ui": f"http://127.0.0.1:{args.port}", "dagster_home": os.environ.get("DAGSTER_HOME"),
               "workspace": str(root / "workspace.yaml")}
    os.environ.setdefault("INGESTION_DAGSTER_URL", started["ui"])  # the intake's and the API's fast lane
    started.update(_start_redis())
    started.update(_embedding_precision())
    started.update(_start_intake())
    if args.api_port:
        started.update(_start_api(args.api_port))

    def describe(rows: list[dict]) -> None:
        row = rows[0]
        print(f"Dagster UI and daemon: {row['ui']} (DAGSTER_HOME={row['dagster_home']})")
        print(f"Redis job queue: {row['redis']}" + (" (started: .data/redis)" if row.get("redis_started") else ""))
        print(f"Embedding: {row['embedding_precision']} on {row['embedding_runtime']}")
        print(f"Intake service (queues, sources, janitor): pid {row['intake_pid']}")
        if "api" in row:
            print(f"HTTP API: {row['api']} (docs at {row['api']}/docs; web app at {row['api']}/app; "
                  f"auth {row['api_auth']})")
        print("Ctrl-C stops them all")

    emit(args, [started], describe)
    from ingestion_pipeline.runtime.fast_lane import record_dev_ui

    record_dev_ui(started["ui"])  # `submit` beside it launches a small batch's run at once (the fast lane)
    sys.stdout.flush()  # execv replaces this process: nothing buffered would be printed
    os.chdir(root)
    os.execv(argv[0], argv)
    return 0  # not reached


def register(sub) -> None:
    """Add `dev` to the top-level subparsers."""
    p = sub.add_parser("dev", help="Dagster UI + daemon with sensors on, the intake service and the HTTP API "
                                   "(127.0.0.1)")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--api-port", type=int, default=8000, help="the HTTP API's port; 0: do not start it")
    add_json_flag(p)
    p.set_defaults(func=cmd_dev)
