"""`queue`: the Redis job queue - push jobs, see depths and statuses, the rag registry, dead letters; and
the intake round `process` runs first (``take_queued_jobs``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ingestion_pipeline.cli.bootstrap import Context, bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_rows, wants_json
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.documents.backlog import backlog, describe
from ingestion_pipeline.queues import rag_registry, redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.redis_consumer import open_queue, take_jobs
from ingestion_pipeline.queues.redis_contract import push
from ingestion_pipeline.queues.sqs import sqs_client


def take_queued_jobs(ctx: Context, args: argparse.Namespace):
    """Everything the queues hold, into the ledger: each SQS queue, then the Redis queue (rounds until a round
    takes nothing). The Redis client, or None when there is no Redis queue. Summaries go to stderr (stdout
    stays the runs' report)."""
    if ctx.settings.queues.sqs_queue_urls:
        _receive_sqs(ctx)
    client = open_queue(ctx.settings)
    if client is None:
        return None
    while True:
        taken = take_jobs(client, ctx.db, ctx.document_store, ctx.settings, fingerprint=ctx.fingerprint)
        if taken.report.taken or taken.report.returned:
            print(f"redis queue: {taken.summary()}", file=sys.stderr)
        if taken.report.taken < ctx.settings.queues.jobs_per_tick:
            return client


def _receive_sqs(ctx: Context) -> None:
    from ingestion_pipeline.queues.sqs import SqsIntake

    intake = SqsIntake(sqs_client(), ctx.db, ctx.settings, document_store=ctx.document_store,
                       metric_store=ctx.metric_store, s3_client_for=ctx.s3_client, fingerprint=ctx.fingerprint)
    for url in ctx.settings.queues.sqs_queue_urls:
        while True:
            polled = intake.poll(url)
            if polled.received:
                print(polled.summary(), file=sys.stderr)
            if polled.received < ctx.settings.queues.sqs_messages_per_tick:
                break


def _client():
    client = open_queue(load_settings())
    if client is None:
        raise ValueError("no Redis answers at the default redis://127.0.0.1:6379/0: set REDIS_URL")
    return client


def cmd_push(args: argparse.Namespace) -> int:
    client = _client()
    records = []
    for name in args.files:
        path = Path(name).absolute()
        job = new_job(args.rag, str(path), submitted_by=args.submitted_by, max_retries=args.max_retries)
        push(client, job, args.priority)
        records.append({"job_id": job.job_id, "filename": job.filename, "priority": args.priority})
    emit(args, records, lambda rows: [print(r["job_id"]) for r in rows])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    client = _client()
    if args.job:
        return _watch(args, lambda: _job_status(args, client))
    with bootstrap() as ctx:  # the ledger's backlog: what every intake queued, with its ETA
        return _watch(args, lambda: _queue_status(args, client, ctx))


def _watch(args: argparse.Namespace, show) -> int:
    while True:
        show()
        if not args.watch:
            return 0
        sys.stdout.flush()
        time.sleep(args.interval)


def _job_status(args: argparse.Namespace, client) -> None:
    record = redis_contract.read_status(client, args.job)
    if not record:
        raise ValueError(f"no status for job {args.job} (unknown, or expired 7 days after it finished)")
    emit(args, [record], lambda rows: [print(f"{k:<21} {v}") for k, v in rows[0].items() if v])


def _queue_status(args: argparse.Namespace, client, ctx: Context) -> None:
    depths = redis_contract.depths(client)
    with ctx.db.connection() as conn:
        waiting = backlog(conn, tenant_id=args.tenant)

    def show(rows: list[dict]) -> None:
        print(redis_contract.depths_summary(rows[0]) + "".join(
            f"\n  consumer {c['consumer']}: {'alive' if c['alive'] else 'gone'}, holding {c['holding']}"
            for c in rows[0]["consumers"]))
        print("files in the ledger (every intake):" if waiting else "files in the ledger: nothing waiting")
        for tenant in waiting:
            print(f"  {describe(tenant)}")

    emit(args, [depths | {"backlog": [t.as_dict() for t in waiting]}], show)


def cmd_dead_letter(args: argparse.Namespace) -> int:
    if args.sqs:
        return _sqs_dead_letters(args)
    client = _client()
    if args.dead_letter_command == "replay":
        moved = redis_contract.replay_dead_letters(client, job_ids=set(args.job) if args.job else None)
        emit(args, moved, lambda rows: print(f"{len(rows)} message(s) back on their queue"))
        return 0
    entries = redis_contract.list_dead_letters(client, args.limit)
    print_rows(args, entries, ["dead_lettered_at", "job_id", "error_code", "reason"])
    if not wants_json(args):
        print(f"{redis_contract.dead_letter_count(client)} dead letter(s)")
    return 0


def _sqs_dead_letters(args: argparse.Namespace) -> int:
    from ingestion_pipeline.queues.sqs import list_dead_letters, replay_dead_letters

    sqs = sqs_client()
    if args.dead_letter_command == "replay":
        moved = replay_dead_letters(sqs, args.sqs)
        emit(args, [{"queue": args.sqs, "replayed": moved}],
             lambda rows: print(f"{moved} message(s) back on {args.sqs}"))
        return 0
    print_rows(args, list_dead_letters(sqs, args.sqs, args.limit), ["message_id", "receives", "body"])
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from ingestion_pipeline.queues.jobs import follow_ledger, list_jobs

    with bootstrap() as ctx:
        with ctx.db.transaction() as conn:
            follow_ledger(conn, "sqs")  # an SQS job's row follows its file's ledger state
        with ctx.db.connection() as conn:
            rows = list_jobs(conn, intake=args.intake, status=args.status, job_id=args.job, limit=args.limit)
    print_rows(args, rows, ["job_id", "intake", "tenant_id", "filename", "status", "file_id", "error_code"])
    return 0


def cmd_rag(args: argparse.Namespace) -> int:
    with bootstrap() as ctx, ctx.db.transaction() as conn:
        if args.rag_command == "add":
            rows = [rag_registry.add_rag(conn, args.rag_id, tenant_id=args.tenant, root=args.root).as_dict()]
        elif args.rag_command == "remove":
            rag_registry.remove_rag(conn, args.rag_id)
            rows = [{"rag_id": args.rag_id, "removed": True}]
        else:
            rows = [r.as_dict() for r in rag_registry.list_rags(conn)]
    print_rows(args, rows, list(rows[0]) if rows else ["rag_id", "tenant_id", "root"])
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core.redis_server import start_local_redis, stop_local_redis

    if args.server_command == "start":
        url = start_local_redis(args.port)
        emit(args, [{"redis": url, "started": url is not None}], lambda rows: print(
            f"redis-server started: {url}" if url else f"something already answers on 127.0.0.1:{args.port}"))
    else:
        pid = stop_local_redis()
        emit(args, [{"stopped_pid": pid}], lambda rows: print(
            f"redis-server {pid} stopped" if pid else "the project's redis-server was not running"))
    return 0


def register(sub) -> None:
    """Add `queue` to the top-level subparsers."""
    p = sub.add_parser("queue", help="the Redis job queue (rag:ingest:*): push, status, dead letters, rags")
    queue_sub = p.add_subparsers(dest="queue_command", required=True)
    push_p = queue_sub.add_parser("push", help="put jobs for files on the queue (prints each job id)")
    push_p.add_argument("files", nargs="+")
    push_p.add_argument("--rag", required=True, help="the rag_id (registered with `queue rag add`)")
    push_p.add_argument("--priority", choices=("high", "normal", "low"), default="normal")
    push_p.add_argument("--submitted-by", choices=("cli", "api", "scheduled"), default="cli")
    push_p.add_argument("--max-retries", type=int, default=3)
    push_p.set_defaults(func=cmd_push)
    status = queue_sub.add_parser("status", help="queue depths and consumers, or one job's status hash")
    status.add_argument("--job", help="a job id")
    status.add_argument("--watch", action="store_true", help="print again every --interval seconds")
    status.add_argument("--interval", type=float, default=2.0)
    status.add_argument("--tenant", help="the ledger's backlog of this tenant only")
    status.set_defaults(func=cmd_status)
    dead = queue_sub.add_parser("dead-letter", help="messages that could not become jobs, with why")
    dead_sub = dead.add_subparsers(dest="dead_letter_command", required=True)
    listing = dead_sub.add_parser("list")
    listing.add_argument("--limit", type=int, default=100)
    replay = dead_sub.add_parser("replay", help="put dead letters back on their queue (all, or --job ID ...)")
    replay.add_argument("--job", action="append", help="a job id (repeatable)")
    for q in (listing, replay):
        q.add_argument("--sqs", metavar="QUEUE_URL", help="the dead-letter queue of this SQS queue instead")
        q.set_defaults(func=cmd_dead_letter)
        add_json_flag(q)
    jobs = queue_sub.add_parser("jobs", help="accepted and refused jobs of both queues (SQS jobs' only status)")
    jobs.add_argument("--intake", choices=("redis", "sqs"))
    jobs.add_argument("--status", choices=("queued", "processing", "done", "failed"))
    jobs.add_argument("--job", help="a job id")
    jobs.add_argument("--limit", type=int, default=100)
    jobs.set_defaults(func=cmd_jobs)
    add_json_flag(jobs)
    rag = queue_sub.add_parser("rag", help="which tenant and folder a rag_id means (admin)")
    rag_sub = rag.add_subparsers(dest="rag_command", required=True)
    add = rag_sub.add_parser("add", help="register a rag: its tenant and the folder its files lie under")
    add.add_argument("rag_id")
    add.add_argument("--tenant", required=True)
    add.add_argument("--root", required=True)
    remove = rag_sub.add_parser("remove")
    remove.add_argument("rag_id")
    for q in (add, remove, rag_sub.add_parser("list")):
        q.set_defaults(func=cmd_rag)
        add_json_flag(q)
    server = queue_sub.add_parser("server", help="the project's own redis-server (.data/redis, 127.0.0.1, AOF on)")
    server_sub = server.add_subparsers(dest="server_command", required=True)
    start = server_sub.add_parser("start")
    start.add_argument("--port", type=int, default=6379)
    for q in (start, server_sub.add_parser("stop")):
        q.set_defaults(func=cmd_server)
        add_json_flag(q)
    for q in (push_p, status):
        add_json_flag(q)
