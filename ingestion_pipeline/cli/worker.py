"""`ingestion-pipeline worker`: a Celery worker that executes the steps of runs (``INGESTION_EXECUTOR=celery``).

Start one or more on any host that reaches the database, the broker and the upload store; each takes the
step tasks of Dagster's ``celery_executor`` from the broker (``CELERY_BROKER_URL``, else ``REDIS_URL``), one
at a time per process (``INGESTION_WORKER_CONCURRENCY``, ``--concurrency``). A worker process keeps its
embedding model across steps. docs/deployment.md says where it runs and how to scale it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from typing import Any


def register(sub) -> None:
    p = sub.add_parser("worker", help="a Celery worker for the steps of runs (INGESTION_EXECUTOR=celery)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="steps run at once (processes); default INGESTION_WORKER_CONCURRENCY (1)")
    p.add_argument("--name", default=None, help="the worker's name (default: ingestion-<random>@<host>)")
    p.add_argument("--loglevel", default="INFO", help="Celery's log level (default INFO)")
    p.add_argument("--queue", action="append", default=None, metavar="NAME",
                   help="a Celery queue to take steps from (repeatable; default: dagster and embedding, every "
                        "step): a GPU host's worker takes only the embedding steps with --queue embedding, a CPU "
                        "host's beside it every other step with --queue dagster")
    p.set_defaults(func=cmd_worker)


def _check_reachable(broker_url: str, database_url: str) -> None:
    """The database and the broker answer before the worker starts (the CLI turns an unreachable database into
    exit 3; an unreachable broker is raised the same way)."""
    import psycopg
    import redis

    from ingestion_pipeline.core.db import check_reachable

    check_reachable(database_url)
    try:
        redis.Redis.from_url(broker_url, socket_connect_timeout=5).ping()
    except redis.RedisError as exc:
        raise psycopg.OperationalError(f"the broker {_without_password(broker_url)} does not answer: {exc}") from exc


def cmd_worker(args: argparse.Namespace) -> int:
    from dagster_celery.executor import CeleryExecutor
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    from ingestion_pipeline.core.db import resolve_dagster_storage_url, resolve_database_url
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.documents.steps.claim import warm_up_the_model_at_claim
    from ingestion_pipeline.runtime.executor import EMBEDDING_QUEUE, RETIRED_QUEUE_VARIABLE, celery_config
    from ingestion_pipeline.runtime.kept_across_steps import keep_across_steps

    settings = load_settings().executor
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    queues = worker_queues(args.queue, os.environ.get(RETIRED_QUEUE_VARIABLE))
    _check_reachable(settings.broker_url, resolve_database_url())
    # a step reads the run's instance from Dagster's storage: DAGSTER_PG_URL, derived from DATABASE_URL when unset
    # (as the other commands do), inherited by the pool's processes
    resolve_dagster_storage_url()
    # the steps it executes are Celery steps, whatever this host's own setting: a document step there spreads its
    # items over the workers (defs/documents/assets.py: spread_over_workers), inherited by the pool's processes
    os.environ["INGESTION_EXECUTOR"] = "celery"
    app = make_app(CeleryExecutor.for_cli(**celery_config(settings)).app_args())
    create_task(app)  # dagster-celery's own task, as its `dagster-celery worker` registers it: one step of a run
    _close_instances_after_each_step()
    keep_across_steps()  # inherited by the pool's processes: each loads the model once
    # a worker that takes no embedding step never needs the model: its claim steps do not load it ahead
    warm_up_the_model_at_claim(EMBEDDING_QUEUE in queues)
    name = args.name or f"ingestion-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    concurrency = args.concurrency or settings.concurrency
    print(f"worker {name}: {concurrency} process(es), queue(s) {','.join(queues)}, broker "
          f"{_without_password(settings.broker_url)}, pid {os.getpid()}", file=sys.stderr, flush=True)
    app.worker_main(["worker", "--queues", ",".join(queues), "--concurrency", str(concurrency), "--hostname", name,
                     "--loglevel", args.loglevel, "--prefetch-multiplier", "1", "--pool", "prefork",
                     "--without-gossip", "--without-mingle"])
    return 0


def _close_instances_after_each_step() -> None:
    """dagster-celery's task builds the run's instance for each step and drops it without disposing it; the project's
    instance (``runtime/pooled_instance.py``) keeps its storages' connections open for its life, which for a dropped
    one ends at a later garbage collection. Each pool process disposes the instances a task opened when the task
    ends (Celery's ``task_prerun`` and ``task_postrun`` signals), so a step's connections close with the step."""
    from celery.signals import task_postrun, task_prerun

    from ingestion_pipeline.runtime.pooled_instance import dispose_instances_opened_since, open_instances

    before: dict[str, Any] = {}

    def opened(task_id: str, **_: Any) -> None:
        before[task_id] = open_instances()

    def ended(task_id: str, **_: Any) -> None:
        dispose_instances_opened_since(before.pop(task_id, open_instances()))

    task_prerun.connect(opened, weak=False)
    task_postrun.connect(ended, weak=False)


def worker_queues(asked: list[str] | None, retired_embedding_queue: str | None = None) -> list[str]:
    """The queues a worker takes steps from (``--queue``, repeatable or comma-separated; default ``dagster`` and
    ``embedding``, every step).

    ``retired_embedding_queue`` (the deprecated ``INGESTION_EMBEDDING_QUEUE``): the name a deployment once gave the
    embedding steps' queue. Its workers keep the roles they had: ``--queue <that name>`` takes the embedding steps
    (of ``embedding`` now, and of the old name still: the runs started before the upgrade sent theirs there), and a
    worker without ``--queue`` only the others. A queue no step goes to is named in a warning."""
    from ingestion_pipeline.core.settings import QUEUE_NAME
    from ingestion_pipeline.runtime.executor import DEFAULT_QUEUE, EMBEDDING_QUEUE, RETIRED_QUEUE_VARIABLE

    old = (retired_embedding_queue or "").strip()
    old = "" if old in (DEFAULT_QUEUE, EMBEDDING_QUEUE) else old  # its steps go where they always went
    default = [DEFAULT_QUEUE, EMBEDDING_QUEUE]
    if (retired_embedding_queue or "").strip():
        print(f"warning: {RETIRED_QUEUE_VARIABLE} is deprecated: the embedding steps go to the queue "
              f"'{EMBEDDING_QUEUE}'; start this worker with --queue {EMBEDDING_QUEUE}"
              + (f" (it takes --queue {old} as that)" if old else "")
              + f" or --queue {DEFAULT_QUEUE}, and unset it", file=sys.stderr, flush=True)
        if old:
            default = [DEFAULT_QUEUE]
    queues = [q.strip() for item in (asked or default) for q in item.split(",") if q.strip()]
    bad = [q for q in queues if not QUEUE_NAME.fullmatch(q)]
    if bad or not queues:
        raise ValueError(f"--queue takes Celery queue names (letters, digits, '.', '_', '-'), not {bad or asked!r}")
    if old:
        queues = [name for q in queues for name in ((q, EMBEDDING_QUEUE) if q == old else (q,))]
    unused = [q for q in queues if q not in (DEFAULT_QUEUE, EMBEDDING_QUEUE, old)]
    if unused:
        print(f"warning: no step goes to the queue(s) {', '.join(unused)}: the embedding steps go to "
              f"'{EMBEDDING_QUEUE}', every other step to '{DEFAULT_QUEUE}' (a GPU host's worker: --queue "
              f"{EMBEDDING_QUEUE})", file=sys.stderr, flush=True)
    return list(dict.fromkeys(queues))


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
    return urlunsplit(parts)
