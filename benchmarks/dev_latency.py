"""How long a small file takes to become searchable with `make dev` running (webserver + daemon).

Starts ``ingestion-pipeline dev`` on a fresh data folder (``dev_session.py``; no Redis: this path does not
use one), ingests one file to warm up (the model's one-time export, the code server), then submits small
files one at a time with ``ingestion-pipeline submit`` and times each from the submit command's start until
its version is active (what search serves). The path measured is the real one: upload_sensor's tick, the
run queue, a run worker process, the five steps. Prints each time, the median, and where each file's seconds
went, from the ledger's and Dagster's own records of the run: the submit command, the wait for the sensor's
run, the run queue, the run worker's start, the resources before the first step, each step.

Small files go in by the CLI (`submit`), by the HTTP API (`POST /v1/ingest`), as objects put into an S3
bucket whose event notifications go to an SQS queue the intake service polls (a moto server on 127.0.0.1, the
bucket bound to the tenant and registered as its source), and as SQS job messages naming an object under a
prefix bound to the tenant (``sqs``, not among the defaults), ``--files`` of each (``--intakes`` picks). With
``--load N``: a bulk load of N files of another tenant is ingested alone, then a second one of N while small
files are submitted one at a time, then a third alone again: each small file's time (p50, p95) and where it
went, and the bulk load's rate beside small files against its rate alone (the mean of the loads before and
after, which meet a smaller and a bigger index). ``--paces`` sets how the small files arrive during a load: 0
(the default), each as soon as the previous is searchable, the most a stream of small files can take from the
load, so the faster they are the more of them there are; 5, one every 5 s, a rate that does not follow their
speed. Each pace gets a load beside small files of its own, followed by one alone. ``--compare`` runs
everything twice in one go: first on the instance file without the run launcher's loaded workers and without the
fair shares of the run slots, and without the fast lane (``before``), then on the project's own (``after``); the
sensor interval is the code's in both.

    .venv/bin/python benchmarks/dev_latency.py [--files 5] [--intakes cli,http,s3] [--load 2000] [--paces 0,5]
        [--compare]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from ingestion_pipeline.core.run_tags import BULK_TENANT_TAG

sys.path.insert(0, str(Path(__file__).resolve().parent))
import process_cpu  # noqa: E402
from dev_session import CLI, dev_session  # noqa: E402
from process_cpu import SessionCpu  # noqa: E402


def _active(conn: psycopg.Connection, tenant: str, filename: str) -> bool:
    """One probe on the benchmark's own connection: a new connection every 0.1 s would cost the server a
    backend each time, CPU the bulk load beside it would be short of."""
    return conn.execute(
        """SELECT 1 FROM ingestion_runs r JOIN document_versions v ON v.doc_id = r.doc_id AND v.is_active
            WHERE r.tenant_id = %s AND r.config->>'filename' = %s AND r.status = 'succeeded'""",
        (tenant, filename)).fetchone() is not None


def breakdown(instance, url: str, tenant: str, filename: str, submit_start: float, submit_end: float,
              seen: float) -> dict[str, float]:
    """Seconds of each stage for one file, from the ledger's row and its Dagster run's records (wall clock)."""
    from dagster import DagsterEventType, RunsFilter

    with psycopg.connect(url) as conn:
        pk, run_id, activated = conn.execute(
            """SELECT r.partition_key, r.dagster_run_id, extract(epoch FROM v.activated_at) FROM ingestion_runs r
                 JOIN document_versions v ON v.file_id = r.file_id
                WHERE r.tenant_id = %s AND r.config->>'filename' = %s AND v.is_active""",
            (tenant, filename)).fetchone()
    record = instance.get_run_record_by_id(run_id)  # the run that did the file (the ledger says which)
    runs_of_batch = len(instance.get_run_records(RunsFilter(tags={"dagster/partition": pk}), limit=10))
    launched = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_STARTING).records
    launched_at = launched[0].event_log_entry.timestamp if launched else record.create_timestamp.timestamp()
    steps = sorted((s for s in instance.get_run_step_stats(run_id) if s.start_time), key=lambda s: s.start_time)
    step_seconds = {s.step_key: (s.end_time or s.start_time) - s.start_time for s in steps}
    first, last = steps[0].start_time, steps[-1].end_time or steps[-1].start_time
    out = {
        "submit command": submit_end - submit_start,
        "submitted -> run created": record.create_timestamp.timestamp() - submit_end,
        "run queue": launched_at - record.create_timestamp.timestamp(),
        "worker start": record.start_time - launched_at,
        "before 1st step": first - record.start_time,
        "steps": sum(step_seconds.values()),
        "between steps": (last - first) - sum(step_seconds.values()),
        "promoted -> seen": seen - float(activated),
        "runs of the batch (1: no duplicate launch)": runs_of_batch,
    }
    out.update({f"  {k}": v for k, v in step_seconds.items()})
    return out


def _post(url: str, filename: str, content: bytes) -> None:
    """``POST /v1/ingest`` as a client uploads: one multipart file."""
    import urllib.request

    boundary = "devlatencyboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
            "Content-Type: text/markdown\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def bulk_runs(instance, since: float, until: float) -> str:
    """How the bulk tenant's runs of a phase went: their count, length, wait in the run queue, and how many ran
    at once on average (the sum of their lengths over the phase's wall time)."""
    from datetime import UTC, datetime

    from dagster import RunsFilter

    records = [r for r in instance.get_run_records(RunsFilter(
        tags={BULK_TENANT_TAG: "bulk"}, created_after=datetime.fromtimestamp(since, UTC)))
        if r.start_time and r.end_time and r.end_time <= until + 60]
    if not records:
        return "no bulk run"
    lengths = [r.end_time - r.start_time for r in records]
    waits = [r.start_time - r.create_timestamp.timestamp() for r in records]
    step_seconds: dict[str, list[float]] = {}
    for r in records:
        for step in instance.get_run_step_stats(r.dagster_run.run_id):
            if step.start_time and step.end_time:
                step_seconds.setdefault(step.step_key, []).append(step.end_time - step.start_time)
    steps = ", ".join(f"{key} {statistics.median(values):.1f}" for key, values in step_seconds.items()
                      if statistics.median(values) >= 0.05)
    return (f"{len(records)} bulk runs: {statistics.median(lengths):.1f} s each (median), queued "
            f"{statistics.median(waits):.1f} s (median), {sum(lengths) / (until - since):.2f} running at once "
            f"(mean); each step's seconds (median): {steps}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _succeeded(conn: psycopg.Connection, tenant: str) -> int:
    return conn.execute("SELECT count(*) FROM ingestion_runs WHERE tenant_id = %s AND status = 'succeeded'",
                        (tenant,)).fetchone()[0]


def _without_the_changes(env: dict[str, str], work: Path) -> None:
    """The instance as it was before run workers were loaded ahead and bulk runs had a share: Dagster's
    default launcher, no limits by run class."""
    import yaml

    path = work / "dagster_home" / "dagster.yaml"
    config = yaml.safe_load(path.read_text())
    config.pop("run_launcher", None)
    env["INGESTION_DAGSTER_URL"] = "off"  # no fast lane: the sensor launches every run
    runs = config["concurrency"]["runs"]
    runs["tag_concurrency_limits"] = [limit for limit in runs["tag_concurrency_limits"]
                                      if limit["key"] not in ("ingestion/run_class", "ingestion/bulk_tenant")]
    path.write_text(yaml.safe_dump(config))


class EventBucket:
    """A moto server (S3 and SQS) with a bucket whose object events under ``PREFIX`` go to a queue: what `dev`'s
    intake service polls (``env``), where the benchmark puts objects, and sends job messages naming objects under
    ``JOBS`` (a location bound to the tenant, watched by no source)."""

    BUCKET, PREFIX, JOBS = "dev-latency-kb", "kb/", "jobs/"

    def __init__(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        from ingestion_pipeline.core.redis_server import free_port

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
        port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
        os.environ.update(credentials)
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        sqs = boto3.client("sqs", endpoint_url=self.endpoint, region_name="us-east-1")
        self.s3.create_bucket(Bucket=self.BUCKET)
        queue = sqs.create_queue(QueueName="dev-latency-events")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.s3.put_bucket_notification_configuration(Bucket=self.BUCKET, NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"], "Filter": {
                "Key": {"FilterRules": [{"Name": "prefix", "Value": self.PREFIX}]}}}]})
        sqs.purge_queue(QueueUrl=queue)  # moto's test event for the configuration
        self.sqs, self.queue = sqs, queue
        self.env = credentials | {"AWS_ENDPOINT_URL_SQS": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint,
                                  "INGESTION_SQS_QUEUE_URLS": queue,
                                  "INGESTION_ALLOWED_S3_ENDPOINTS": self.endpoint}

    def register(self, env: dict[str, str], tenant: str) -> None:
        """The bucket's prefix bound to the tenant and registered as its source (the operator's commands)."""
        uri = f"s3://{self.BUCKET}/{self.PREFIX}"
        for command in (["tenant", "bind", tenant, uri], ["source", "add", uri, "--tenant", tenant]):
            subprocess.run([CLI, *command, "--endpoint-url", self.endpoint], env=env, check=True,
                           capture_output=True)
        # a job's object is read through the AWS environment's endpoint (AWS_ENDPOINT_URL_S3): bound without one
        subprocess.run([CLI, "tenant", "bind", tenant, f"s3://{self.BUCKET}/{self.JOBS}"], env=env, check=True,
                       capture_output=True)

    def put(self, name: str, content: bytes) -> None:
        self.s3.put_object(Bucket=self.BUCKET, Key=self.PREFIX + name, Body=content)

    def job(self, tenant: str, name: str, content: bytes) -> None:
        """The object stored under ``JOBS``, then a job message naming it sent to the queue (docs/queues.md)."""
        key = self.JOBS + name
        self.s3.put_object(Bucket=self.BUCKET, Key=key, Body=content)
        self.sqs.send_message(QueueUrl=self.queue, MessageBody=json.dumps({
            "tenant": tenant, "upload_uri": f"s3://{self.BUCKET}/{key}", "filename": name,
            "content_hash": hashlib.sha256(content).hexdigest()}))

    def stop(self) -> None:
        self.server.stop()


def _pace_name(pace: float) -> str:
    return f"one every {pace:g} s" if pace else "one after another"


def session(label: str, files: int, load: int, before: bool, intakes: tuple[str, ...],
            paces: tuple[float, ...] = (0.0,)) -> dict[str, float]:
    """One `make dev` session: small files idle, then (``load``) beside a bulk load. Figures by name."""
    figures: dict[str, float] = {}
    events = EventBucket() if {"s3", "sqs"} & set(intakes) else None

    def prepare(env: dict[str, str], work: Path) -> None:
        if before:
            _without_the_changes(env, work)
        if events is not None:
            env.update(events.env)

    with contextlib.ExitStack() as stack:
        if events is not None:
            stack.callback(events.stop)
        dev = stack.enter_context(dev_session("ip-dev-latency-", before_dev=prepare))
        if events is not None:
            events.register(dev.env, "dev")
        os.environ.update(DAGSTER_HOME=dev.env["DAGSTER_HOME"], DAGSTER_PG_URL=subprocess.run(
            [CLI, "db", "url", "--dagster"], env=dev.env, check=True, capture_output=True, text=True).stdout.strip())
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        counter = iter(range(10**6))
        probe = stack.enter_context(psycopg.connect(dev.url, autocommit=True))
        cpu = SessionCpu(dev.process.pid, dev.work / "data", database_url=dev.url)
        cpu.start()
        stack.callback(cpu.stop)

        def ingest(timeout: float = 300, record: list | None = None, via: str = "cli") -> float:
            i = next(counter)
            name = f"note-{i}.md"
            path = dev.work / name
            path.write_text(f"# Note {i}\n\nNote {i}: the ferry leaves at {i % 24} o'clock from pier {i}.\n")
            start, wall = time.perf_counter(), time.time()
            if via == "http":
                _post(f"{dev.api_url}/v1/ingest?tenant_id=dev", name, path.read_bytes())
            elif via == "s3":
                events.put(name, path.read_bytes())
            elif via == "sqs":
                events.job("dev", name, path.read_bytes())
            else:
                subprocess.run([CLI, "submit", "--tenant", "dev", str(path)], env=dev.env, check=True,
                               capture_output=True)
            submitted = time.time()
            while time.perf_counter() - start < timeout:
                dev.check_alive()
                if _active(probe, "dev", name):
                    seconds = time.perf_counter() - start
                    if record is not None:  # read once the phase is over: Dagster's records cost CPU to read
                        record.append(("dev", name, wall, submitted, time.time()))
                    return seconds
                time.sleep(0.1)
            raise SystemExit(f"{name} not searchable after {timeout} s:\n{dev.log_tail()}")

        def show(pending: list[tuple], what: str) -> list[dict[str, float]]:
            stages_of = [breakdown(instance, dev.url, *args) for args in pending]
            print(f"[{label}] where the seconds go ({what}, median):")
            for name in stages_of[0] if stages_of else ():
                values = [s.get(name, 0.0) for s in stages_of]
                if name.startswith("runs of"):  # a count: the most any file's batch had
                    print(f"  {name:<40} {max(values):6.0f} (most)")
                    continue
                figures[f"stage {what}: {name}"] = statistics.median(values)
                print(f"  {name:<40} {statistics.median(values):6.2f} s")
            return stages_of

        def bulk(tag: str) -> list[str]:
            folder = dev.work / tag
            folder.mkdir()
            paths = []
            for i in range(load):
                path = folder / f"{tag}-{i}.md"
                path.write_text(f"# {tag} {i}\n\nPart {i} of the {tag} load: shipment {i * 7919 % 100003}.\n")
                paths.append(str(path))
            return paths

        def submit_bulk(paths: list[str]) -> float:
            started = time.perf_counter()
            subprocess.run([CLI, "submit", "--tenant", "bulk", *paths], env=dev.env, check=True, capture_output=True)
            return started

        warm_up = ingest(600)
        print(f"[{label}] warm-up file (the daemon starting, the model's one-time export): {warm_up:.1f} s", flush=True)
        for via in intakes:
            times, stages = [], []
            cpu.mark()
            for _ in range(files):
                times.append(ingest(record=stages, via=via))
                print(f"[{label}] idle, {via}: small file searchable after {times[-1]:.1f} s", flush=True)
            process_cpu.show(f"[{label}] CPU of the small files, idle, by {via}", cpu.mark(), sum(times),
                             {"small files": files})
            figures[f"idle {via} p50"], figures[f"idle {via} p95"] = (statistics.median(times),
                                                                      _percentile(times, 0.95))
            print(f"\n[{label}] submit to searchable, idle, by {via}: median {figures[f'idle {via} p50']:.1f} s, "
                  f"p95 {figures[f'idle {via} p95']:.1f} s ({files} files, one at a time)")
            show(stages, f"idle, {via}")
        if not load:
            return figures

        done = 0  # the bulk tenant's files succeeded so far, over every load of the session

        def alone(tag: str) -> tuple[float, float]:
            """The load's rate alone (files/s) and the whole host's busy CPU-seconds meanwhile."""
            nonlocal done
            paths = bulk(tag)
            cpu.mark()
            since = time.time()
            started = submit_bulk(paths)
            while _succeeded(probe, "bulk") < done + load:
                dev.check_alive()
                time.sleep(0.5)
            seconds = time.perf_counter() - started
            done += load
            phase = cpu.mark()
            process_cpu.show(f"[{label}] CPU of the bulk load alone", phase, seconds, {"bulk files": load})
            print(f"[{label}] alone: {bulk_runs(instance, since, time.time())}")
            print(f"\n[{label}] bulk load of {load} files alone: {load / seconds:.1f} files/s", flush=True)
            return load / seconds, phase[process_cpu.HOST]

        def beside(tag: str, pace: float) -> tuple[float, float, list[float], list[tuple]]:
            """The bulk load beside small files: one after another as each becomes searchable (``pace`` 0), or
            one every ``pace`` seconds from the previous one's submission (the next waits for the previous to be
            searchable, which is well under the pace here): an arrival rate that does not follow the small
            files' own speed, as people's uploads do not."""
            nonlocal done
            paths = bulk(tag)
            cpu.mark()
            since = time.time()
            started = submit_bulk(paths)
            times, stages = [], []
            while _succeeded(probe, "bulk") < done + load:
                submitted = time.perf_counter()
                times.append(ingest(900, record=stages))
                print(f"[{label}] under load ({_succeeded(probe, 'bulk') - done}/{load} bulk files done): small "
                      f"file searchable after {times[-1]:.1f} s", flush=True)
                while pace and time.perf_counter() - submitted < pace and _succeeded(probe, "bulk") < done + load:
                    dev.check_alive()
                    time.sleep(0.1)
            seconds = time.perf_counter() - started
            done += load
            phase = cpu.mark()
            process_cpu.show(f"[{label}] CPU of the bulk load beside small files ({_pace_name(pace)})", phase,
                             seconds, {"bulk files": load, "small files": len(times)})
            print(f"[{label}] beside small files: {bulk_runs(instance, since, time.time())}")
            return load / seconds, phase[process_cpu.HOST], times, stages

        rate_before, host_before = alone("load-0")
        for n, pace in enumerate(paces):
            rate, host, loaded_times, loaded_stages = beside(f"load-{2 * n + 1}", pace)
            rate_after, host_after = alone(f"load-{2 * n + 2}")  # the index is as big as beside the small files
            reference = (rate_before + rate_after) / 2
            # The small files' own work, their `submit` commands included: what the host did beside the load
            # beyond what the same load cost it alone. The load's rate over the CPU those files left it tells a
            # load held back by the small files' work from one held back by anything else.
            small_cpu = host - (host_before + host_after) / 2
            left = 1 - small_cpu / host if host > 0 else 1.0
            rate_before, host_before = rate_after, host_after
            key = "" if n == 0 else f" ({_pace_name(pace)})"  # the first pace keeps the names --compare prints
            figures[f"bulk files/s alone{key}"], figures[f"bulk files/s beside small files{key}"] = reference, rate
            figures[f"bulk beside / alone %{key}"] = 100 * rate / reference
            figures[f"small files' share of the host %{key}"] = 100 * (1 - left)
            figures[f"bulk beside / (alone x what was left) %{key}"] = 100 * rate / (reference * left)
            figures[f"loaded p50{key}"] = statistics.median(loaded_times)
            figures[f"loaded p95{key}"] = _percentile(loaded_times, 0.95)
            print(f"[{label}] bulk load of {load} files beside {len(loaded_times)} small files "
                  f"({_pace_name(pace)}): {rate:.1f} files/s ({100 * rate / reference:.0f} % of its rate alone, "
                  f"{reference:.1f} files/s: the mean of before and after)")
            print(f"[{label}] the small files' own work ({_pace_name(pace)}): {small_cpu:.1f} CPU-s "
                  f"({small_cpu / max(len(loaded_times), 1):.2f} a file, their submit commands included), "
                  f"{100 * (1 - left):.0f} % of the host's busy time beside the load; the load kept "
                  f"{100 * rate / (reference * left):.0f} % of its rate alone on the CPU they left it")
            print(f"[{label}] small files during the load ({_pace_name(pace)}): median "
                  f"{figures[f'loaded p50{key}']:.1f} s, p95 {figures[f'loaded p95{key}']:.1f} s "
                  f"({len(loaded_times)} files)")
            loaded_stages = show(loaded_stages, f"under load, {_pace_name(pace)}")
            slowest = max(range(len(loaded_times)), key=loaded_times.__getitem__)
            print(f"[{label}] the slowest small file under load ({_pace_name(pace)}, {loaded_times[slowest]:.1f} s):")
            for name, value in loaded_stages[slowest].items():
                print(f"  {name:<40} {value:6.2f}" + ("" if name.startswith("runs of") else " s"))
        return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5, help="small files submitted one at a time, idle")
    parser.add_argument("--load", type=int, default=0, help="files of the other tenant's bulk load (0: none)")
    parser.add_argument("--intakes", default="cli,http,s3",
                        help="comma-separated: cli (submit), http (POST /v1/ingest), s3 (an object put, its event "
                             "through SQS), sqs (a job message on SQS naming an object)")
    parser.add_argument("--paces", default="0",
                        help="comma-separated seconds between the small files' submissions during a load, one "
                             "load beside small files each: 0 submits the next as soon as the previous is "
                             "searchable (the most the small files can take), 5 one every 5 s")
    parser.add_argument("--compare", action="store_true",
                        help="first without loaded run workers and fair shares (before), then as configured")
    args = parser.parse_args()
    runs = [("before", True), ("after", False)] if args.compare else [("now", False)]
    intakes = tuple(i for i in args.intakes.split(",") if i)
    unknown = set(intakes) - {"cli", "http", "s3", "sqs"}
    if unknown:
        parser.error(f"unknown intakes: {', '.join(sorted(unknown))}")
    paces = tuple(float(p) for p in args.paces.split(",") if p)
    if not paces or any(p < 0 for p in paces):
        parser.error("--paces takes seconds >= 0, e.g. 0,5")
    results = {label: session(label, args.files, args.load, before, intakes, paces) for label, before in runs}
    if args.compare:
        print("\nbefore and after, side by side:")
        for name in results["after"]:
            b, a = results["before"].get(name), results["after"][name]
            unit = "" if "files/s" in name or "%" in name else " s"
            shown = f"{b:8.2f}{unit}" if b is not None else "       -"
            print(f"  {name:<42} {shown}  ->  {a:8.2f}{unit}")


if __name__ == "__main__":
    main()
