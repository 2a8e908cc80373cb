"""`ingestion-pipeline intake`: the intake service, the one long-lived process that brings work into the ledger.

Dagster's sensors only plan (they read the ledger and the queues and return run requests); the work of
bringing files in happens here, each kind a duty with its own interval and a bounded round
(``core/duties.py``), each round's outcome one line of this service's log:

- ``redis``: jobs off the Redis queue (``rag:ingest:*``), each file stored with its SHA-256 and its ledger
  row committed before the job is acknowledged; job statuses follow the ledger (every
  INGESTION_INTAKE_INTERVAL_SECONDS, at most INGESTION_QUEUE_JOBS_PER_TICK jobs a round);
- ``sqs``: each queue of INGESTION_SQS_QUEUE_URLS (S3 event notifications and job messages), a message deleted
  only after its row commits (INGESTION_SQS_MESSAGES_PER_TICK a queue and round);
- ``sources``: each active S3 source listed with its cursor (INGESTION_S3_PAGES_PER_TICK pages a source,
  every INGESTION_SOURCE_SYNC_INTERVAL_SECONDS);
- ``janitor``: Dagster runs whose worker stopped beating marked failed, expired claims handed back, forgotten
  batches relaunched (every INGESTION_JANITOR_INTERVAL_SECONDS; ``runtime/janitor.py``).

Several intake services may run at once (on one host or many): every duty is safe to run twice (Redis jobs
are moved atomically, SQS messages are leased by their visibility timeout, a source's listing is claimed
by one service at a time, the janitor's statements lock what they change).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ingestion_pipeline.cli.bootstrap import Context, bootstrap
from ingestion_pipeline.core.duties import Duties, Duty

DUTIES = ("redis", "sqs", "sources", "janitor")


def _current_fingerprint(ctx: Context) -> str:
    """The pipeline fingerprint under the deployment's recorded model decision as it is now: a fresh Embedder
    reads the decision (one query; no weights load), so a `model prepare --change` applies from the next round
    of a service that runs for weeks, as it did from a sensor's next tick."""
    from ingestion_pipeline import services

    return services.fingerprint(ctx.settings, services.embedder(ctx.settings, database_url=ctx.url))


def _launch_now(ctx: Context) -> None:
    """Jobs were accepted: their small batches' runs now, through the webserver (runtime/fast_lane.py), not at the
    upload sensor's next loop; nothing without a webserver URL."""
    from ingestion_pipeline.runtime.fast_lane import launch_interactive, webserver_url

    url = webserver_url(ctx.settings)
    if url:
        launch_interactive(ctx.db, ctx.settings, url)


class RedisDuty:
    """The Redis queue's round; the client is opened on the first round that finds a server and kept."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.client, self.said_none = ctx, None, False

    def __call__(self) -> str | None:
        from ingestion_pipeline.queues.redis_consumer import open_queue, take_jobs

        if self.client is None:
            self.client = open_queue(self.ctx.settings)  # RedisUnavailable: logged, tried again
            if self.client is None:
                if self.said_none:
                    return None
                self.said_none = True
                return "no Redis queue (REDIS_URL unset and nothing at 127.0.0.1:6379, or none); looking again " \
                       "every round"
        try:
            taken = take_jobs(self.client, self.ctx.db, self.ctx.document_store, self.ctx.settings,
                              fingerprint=_current_fingerprint(self.ctx))
        except Exception:
            self.close()  # a new connection next round
            raise
        if taken.report.taken:
            _launch_now(self.ctx)
        return taken.summary() if taken.report.taken or taken.report.returned else None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _sqs_round(ctx: Context) -> Callable[[], str | None]:
    from ingestion_pipeline.queues.sqs import SqsIntake, sqs_client

    intake = None

    def round_() -> str | None:
        nonlocal intake
        if intake is None:
            intake = SqsIntake(sqs_client(), ctx.db, ctx.settings, document_store=ctx.document_store,
                               metric_store=ctx.metric_store, s3_client_for=ctx.s3_client,
                               fingerprint="")
        intake.fingerprint = _current_fingerprint(ctx)
        said = [polled.summary() for polled in (intake.poll(url) for url in ctx.settings.queues.sqs_queue_urls)
                if polled.received]
        if said:
            _launch_now(ctx)
        return "; ".join(said) or None

    return round_


def _sources_round(ctx: Context) -> Callable[[], str | None]:
    from ingestion_pipeline.defs.resources import S3Clients
    from ingestion_pipeline.defs.s3_resource import S3Resource
    from ingestion_pipeline.sources.sync_pass import sync_sources

    clients = S3Clients(S3Resource())

    def round_() -> str | None:
        reports = sync_sources(ctx.db, ctx.settings, clients, ctx.metric_store)
        said = [f"source {r.source}: listed {r.listed}, new {r.new}, changed {r.changed}, skipped {r.skipped}, "
                f"deleted {r.deleted}" + (" (pass completed)" if r.pass_completed else "")
                for r in reports if r.new or r.changed or r.skipped or r.deleted]
        return "; ".join(said) or None

    return round_


def _janitor_round(ctx: Context, instance: Any = None) -> Callable[[], str | None]:
    from ingestion_pipeline.runtime.janitor import run_janitor
    from ingestion_pipeline.runtime.pooled_instance import pooled_instance

    def round_() -> str | None:
        nonlocal instance
        if instance is None:  # the project's instance (DAGSTER_HOME), opened on the first round
            instance = pooled_instance()
        report = run_janitor(instance, ctx.db, ctx.settings.reliability, index_nice=ctx.settings.batch.index_nice)
        return None if report.is_empty else report.describe()

    return round_


def intake_duties(ctx: Context, names: tuple[str, ...] = DUTIES, *, instance: Any = None) -> list[Duty]:
    """The service's duties, those named (``--only``); SQS only when INGESTION_SQS_QUEUE_URLS names a queue.
    ``instance``: the Dagster instance of the janitor (default: the project's, on its first round)."""
    queues, every = ctx.settings.queues, ctx.settings
    built = {
        "redis": lambda: Duty("redis", queues.intake_interval_seconds, RedisDuty(ctx)),
        "sqs": lambda: Duty("sqs", queues.intake_interval_seconds, _sqs_round(ctx)) if queues.sqs_queue_urls
        else None,
        "sources": lambda: Duty("sources", every.s3.sync_interval_seconds, _sources_round(ctx)),
        "janitor": lambda: Duty("janitor", every.reliability.janitor_interval_seconds, _janitor_round(ctx, instance)),
    }
    return [duty for duty in (built[name]() for name in names) if duty is not None]


def _log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} intake {line}", file=sys.stderr, flush=True)


def cmd_intake(args: argparse.Namespace) -> int:
    names = tuple(n.strip() for n in args.only.split(",") if n.strip()) if args.only else DUTIES
    unknown = sorted(set(names) - set(DUTIES))
    if unknown:
        raise ValueError(f"--only takes {', '.join(DUTIES)}; got {', '.join(unknown)}")
    with bootstrap() as ctx:
        duties = Duties(intake_duties(ctx, names), _log)
        if args.once:
            results = duties.run_once()
            return 1 if any(r.error for r in results) else 0
        _log("started: " + ", ".join(f"{d.name} every {d.interval_seconds:g} s" for d in duties.duties))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: duties.stop())
        duties.run_until_stopped()
        _log("stopped")
    return 0


def register(sub) -> None:
    p = sub.add_parser("intake", help="the intake service: Redis and SQS queues, S3 sources, the janitor")
    p.add_argument("--once", action="store_true", help="one round of each duty, then exit (1 if a round failed)")
    p.add_argument("--only", help=f"comma-separated duties to run (default all: {','.join(DUTIES)})")
    p.set_defaults(func=cmd_intake)
