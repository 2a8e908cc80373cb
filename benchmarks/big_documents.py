"""A big scanned document and its revision: what a revised page costs against reading the whole document again.

OCR is the most expensive thing done to a page (Tesseract, 0.2-2 s a page on one core). A revised scan whose
other pages are unchanged should cost its changed pages, not the document. This writes an N-page scanned PDF
(pages of generated prose rendered at 200 dpi, no text layer), then in a throwaway data folder (its own
embedded Postgres) runs `ingestion-pipeline ingest`:

1. the first version (`--key manual.pdf`): every page read by OCR;
2. a revision with M pages changed, under the same key: only the changed pages read, the others' text reused;
3. the same revision under another key (a new document, nothing to reuse): what the revision cost before
   pages were reused.

Prints for each the command's wall time, the extract step's time (from the ledger's timings), pages read by
OCR and pages reused, and the revision's time as a share of the first ingest.

Then units side by side (``--units``): the corpus's 619-page PDF and the scan, each ingested as a new document
(a) unsplit on one core, (b) in units of ``INGESTION_UNIT_PAGES`` on one core, (c) in units on two cores with
two lanes (two extraction workers). The whole ``ingest`` process tree is pinned with ``taskset``, standing in for
one-core and two-core hosts (Postgres is not pinned). Printed: wall time, the extract step's time, its seconds
per page, the makespan ratio of the extract step (two workers / one) and the cost of splitting (units / unsplit
on one core).

With ``--celery``, the same on Celery workers (``INGESTION_EXECUTOR=celery``: each unit a mapped step of its own),
each worker process pinned to its own core with ``taskset``, standing in for one-core hosts; a real redis-server
as the broker. Each configuration is warmed up first (every worker loads the model on a small document), then
the document is ingested as a new one: wall time, the extract makespan (first unit planned to last unit kept),
the units' summed read time, and the makespan ratio of two workers to one; then the scan's revision under the
same key on the two warm workers (the deployment's case: the model loaded, the code imported).

With ``--dev``, the first version and its revisions go through a running deployment instead of one ``ingest``
command each: ``ingestion-pipeline dev`` (``dev_session.py``: the daemon's sensors, the run queue, a warm run
worker with the code imported), warmed up by one small file, each version submitted with ``submit --key`` and
timed from the command's start until its version is active; where each one's seconds went is printed from the
ledger's and Dagster's records (``dev_latency.breakdown``). A revision there pays no command start: what a
person who uploads a revised scan into a running deployment waits. ``--dev-celery-workers N`` runs that
deployment with ``INGESTION_EXECUTOR=celery`` on N workers pinned to a core each (warmed up by four small files,
so that each worker process has loaded the model): the run worker orchestrates, each step is a Celery task.

With ``--sections``, the corpus's long text (War and Peace) and 872-page DOCX, then a revision of each with one
sentence added mid-document, under the same key: chunked in sections (``INGESTION_UNIT_CHARACTERS``, the
default) and whole, each way in a tenant of its own; the chunk step's seconds, sections and sections reused.
With ``--sections --celery``, instead, the same two documents chunked on pinned Celery workers: in one step on one
worker, and in parts (``INGESTION_CHUNK_PART_CHARACTERS``, one step each) on one and on two workers; the chunking's
makespan (first chunk step begun to last one ended), its steps and its summed time, with vectors reused (each
document ingested once before), so that the runs are chunking, staging and promotion.

    .venv/bin/python benchmarks/big_documents.py [--pages 60] [--changed 2] [--revisions 5] [--units] [--celery]
        [--dev [--dev-celery-workers 2]] [--sections] [--corpus DIR]
    .venv/bin/python benchmarks/big_documents.py --celery-revision 2   # only the revision on Celery, twice
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare_peers import prepare_model, scratch_environment  # noqa: E402

WORDS = ("harbour board ferry schedule winter channel dredging budget tide water crown council minutes vote "
         "master pilot cargo quay lock gate season report engineer survey depth storm repair contract levy "
         "lighthouse beacon berth tonnage fishing fleet license inspection chart buoy warehouse crane")


def page_lines(page: int, revision: int = 0) -> list[str]:
    """Twenty lines of generated prose for a page: the same for the same (page, revision)."""
    rng = random.Random(page * 1000 + revision)
    lines = [f"Section {page}. Harbour operations, revision {revision}"]
    for _ in range(19):
        lines.append(" ".join(rng.choice(WORDS.split()) for _ in range(9)).capitalize() + ".")
    return lines


def ingest(env: dict, path: Path, key: str, cores: str | None = None, tenant: str = "bench") -> float:
    start = time.perf_counter()
    pinned = ["taskset", "-c", cores] if cores else []
    done = subprocess.run([*pinned, str(Path(sys.executable).parent / "ingestion-pipeline"), "ingest", "--tenant",
                           tenant, "--key", key, str(path)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ingest of {path.name} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - start


def last_file(database_url: str) -> dict:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT status, error, stats FROM ingestion_runs ORDER BY file_id DESC LIMIT 1").fetchone()


def encoded(stats: dict) -> str:
    """A file's chunks encoded by the model and those whose stored vector was reused (the same text, name and
    headings in the tenant)."""
    return (f"chunks encoded {stats.get('embedded', 0)}, vectors reused {stats.get('embeddings_reused', 0)} "
            f"of {stats.get('chunks', 0)}")


def sessions_opened(database_url: str) -> int:
    """Sessions the server has opened so far, every database together: each a fork and a login."""
    from process_cpu import sessions_by_database

    return sum(sessions_by_database(database_url).values())


def prepare(work: Path, env: dict, pages: int, changed_count: int) -> tuple[Path, Path]:
    """The throwaway data folder's database and model, and the scan's two versions (first, revised)."""
    from ingestion_pipeline.core.db import resolve_database_url
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages

    database_url = resolve_database_url(allow_embedded=True)
    env["DATABASE_URL"] = database_url
    subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "db", "migrate"], env=env, check=True,
                   capture_output=True)
    prepare_model(env)
    changed = sorted(random.Random(7).sample(range(1, pages + 1), changed_count))
    # Both versions named manual.pdf, as a revision arrives (the same S3 key, an edited file uploaded again): the
    # document's name is embedded with each chunk (chunking.context_line), so a revision under another file name
    # is a renamed document whose every chunk is encoded again, not the page-level revision measured here.
    (work / "first").mkdir(exist_ok=True)
    (work / "revised").mkdir(exist_ok=True)
    first = write_scanned_pages(work / "first" / "manual.pdf", [page_lines(p) for p in range(1, pages + 1)])
    revised = write_scanned_pages(work / "revised" / "manual.pdf", [page_lines(p, 1 if p in changed else 0)
                                                                    for p in range(1, pages + 1)])
    print(f"a {pages}-page scanned PDF ({first.stat().st_size / 1e6:.1f} MB); the revision changes page(s) "
          f"{', '.join(map(str, changed))}", flush=True)
    return first, revised


def measure(env: dict, first: Path, revised: Path, revisions: int = 1) -> list[tuple]:
    """The ingests in the throwaway data folder: (label, wall s, extract s, OCR read, reused) each. With
    ``revisions`` > 1 the two versions alternate under the same key (each ingest after the first is a revision
    of its changed pages) and the revision's row is the run of median wall time: one run on two busy cores
    moves by a second."""
    database_url = env["DATABASE_URL"]
    copy = revised.parent.parent / "manual-copy.pdf"  # another name: no stored vector matches its chunks either
    shutil.copyfile(revised, copy)

    def one(label: str, path: Path, key: str) -> tuple:
        wall = ingest(env, path, key)
        file = last_file(database_url)
        if file["status"] != "succeeded":
            sys.exit(f"{label}: {file['status']}: {file['error']}")
        stats = file["stats"]
        steps = ", ".join(f"{step} {ms / 1000:.1f}" for step, ms in stats["timings_ms"].items())
        print(f"  {label}: {wall:.1f} s (steps, s: {steps}; the rest is the command's start, Dagster's run and "
              f"the model's load); {encoded(stats)}", flush=True)
        return (label, wall, stats["timings_ms"]["extract"] / 1000, stats.get("ocr_pages_read", 0),
                stats.get("ocr_pages_reused", 0))

    rows = [one("first version", first, "manual.pdf")]
    label = "revision, same key (pages reused)"
    runs = sorted((one(label, revised if n % 2 == 0 else first, "manual.pdf") for n in range(revisions)),
                  key=lambda row: row[1])
    if revisions > 1:
        print(f"  {revisions} revisions: wall s {', '.join(f'{r[1]:.1f}' for r in runs)}; the median is kept",
              flush=True)
    rows.append(runs[len(runs) // 2])
    rows.append(one("revision as a new document (nothing reused)", copy, "manual-copy.pdf"))
    return rows


def measure_dev(pages: int, changed_count: int, revisions: int, celery_workers: int = 0) -> list[tuple]:
    """The first version and ``revisions`` revisions (alternating, as ``measure``) through ``make dev``: (label, wall
    s, extract s, OCR read, reused) each, the revision's row the median's; each one's stages printed. With
    ``celery_workers``, the deployment runs ``INGESTION_EXECUTOR=celery`` on that many workers pinned to a core
    each: the run worker only orchestrates, every step is a Celery task."""
    import psycopg
    from dev_latency import breakdown
    from dev_session import CLI, dev_session

    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages

    def on_celery(env: dict, work: Path) -> None:
        env["INGESTION_EXECUTOR"] = "celery"

    workers = None
    with contextlib.ExitStack() as stack:
        dev = stack.enter_context(dev_session("bench-big-dev-", redis=bool(celery_workers),
                                              before_dev=on_celery if celery_workers else None))
        if celery_workers:
            workers = CeleryWorkers(dev.env, dev.work, celery_workers, redis_url=dev.env["REDIS_URL"])
            stack.callback(workers.stop)
            print(f"on {celery_workers} Celery worker(s), one core each", flush=True)
        os.environ.update(DAGSTER_HOME=dev.env["DAGSTER_HOME"], DAGSTER_PG_URL=subprocess.run(
            [CLI, "db", "url", "--dagster"], env=dev.env, check=True, capture_output=True, text=True).stdout.strip())
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        changed = sorted(random.Random(7).sample(range(1, pages + 1), changed_count))
        versions = []
        for name, revision_of in (("first", lambda p: 0), ("revised", lambda p: 1 if p in changed else 0)):
            (dev.work / name).mkdir()
            versions.append(write_scanned_pages(dev.work / name / "manual.pdf",
                                                [page_lines(p, revision_of(p)) for p in range(1, pages + 1)]))
        print(f"a {pages}-page scanned PDF ({versions[0].stat().st_size / 1e6:.1f} MB); the revision changes "
              f"page(s) {', '.join(map(str, changed))}; through `ingestion-pipeline dev`", flush=True)
        probe = psycopg.connect(dev.url, autocommit=True)

        def submit(path: Path, key: str, label: str, timeout: float = 900) -> tuple:
            before = probe.execute("SELECT coalesce(max(file_id), 0) FROM ingestion_runs").fetchone()[0]
            start, wall = time.perf_counter(), time.time()
            subprocess.run([CLI, "submit", "--tenant", "bench", "--key", key, str(path)], env=dev.env, check=True,
                           capture_output=True)
            submitted = time.time()
            while time.perf_counter() - start < timeout:
                dev.check_alive()
                row = probe.execute(
                    """SELECT status, error, stats FROM ingestion_runs WHERE file_id > %s
                        AND status IN ('succeeded', 'failed', 'dead_letter') ORDER BY file_id DESC LIMIT 1""",
                    (before,)).fetchone()
                if row is not None:
                    seconds, seen = time.perf_counter() - start, time.time()
                    break
                time.sleep(0.1)
            else:
                raise SystemExit(f"{label} not done after {timeout} s:\n{dev.log_tail()}")
            status, error, stats = row
            if status != "succeeded":
                raise SystemExit(f"{label}: {status}: {error}")
            stages = breakdown(instance, dev.url, "bench", path.name, wall, submitted, seen)
            where = ", ".join(f"{k.strip()} {v:.1f}" for k, v in stages.items() if not k.startswith("runs of"))
            print(f"  {label}: {seconds:.1f} s ({where}); {encoded(stats)}", flush=True)
            if celery_workers:
                print_step_breakdown(dev.url, seconds)
            return (label, seconds, stats["timings_ms"]["extract"] / 1000, stats.get("ocr_pages_read", 0),
                    stats.get("ocr_pages_reused", 0))

        # on Celery, each worker process loads the model in the first embedding step it takes: text of its own
        # each, so that every warm-up encodes
        for n in range(1 + 3 * bool(celery_workers)):
            warm = dev.work / f"warm-up-{n}.md"
            warm.write_text(f"# Warm-up {n}\n\nThe deployment's code server, run worker and model, loaded once "
                            f"({n}).\n")
            submit(warm, warm.name, "warm-up (a small file; not counted)")
        rows = [submit(versions[0], "manual.pdf", "first version")]
        label = "revision, same key (pages reused)"
        runs = sorted((submit(versions[1] if n % 2 == 0 else versions[0], "manual.pdf", label)
                       for n in range(revisions)), key=lambda row: row[1])
        if revisions > 1:
            print(f"  {revisions} revisions: wall s {', '.join(f'{r[1]:.1f}' for r in runs)}; the median is kept",
                  flush=True)
        rows.append(runs[len(runs) // 2])
        probe.close()
        return rows


def revised_copy(source: Path, work: Path) -> tuple[Path, Path]:
    """``source`` and a revision of it, both under its own name in folders of their own: one sentence added to the
    paragraph at the middle of the text (a DOCX's paragraph through python-docx, a text file's line)."""
    first, revised = work / "sections-first" / source.name, work / "sections-revised" / source.name
    for path in (first, revised):
        path.parent.mkdir(exist_ok=True)
    shutil.copy(source, first)
    added = " A sentence the revision added."
    if source.suffix == ".docx":
        import docx

        document = docx.Document(str(source))
        paragraphs = [p for p in document.paragraphs if len(p.text) > 200]
        paragraphs[len(paragraphs) // 2].add_run(added)
        document.save(str(revised))
    else:
        lines = source.read_text(encoding="utf-8").split("\n")
        long = [i for i, line in enumerate(lines) if len(line) > 60]
        lines[long[len(long) // 2]] += added
        revised.write_text("\n".join(lines), encoding="utf-8")
    return first, revised


def measure_sections(env: dict, work: Path, documents: list[Path], revisions: int) -> list[tuple]:
    """Each document ingested, then ``revisions`` revisions under the same key (the revised and the first
    version in turn: each differs from the one served by one sentence): chunked in sections (the default
    ``INGESTION_UNIT_CHARACTERS``) and whole (a unit larger than any file), each in a tenant of its own. Rows:
    (document, how, version, wall s, chunk step s, sections, sections reused, chunks, encoded), the revisions'
    the run of median wall time."""
    rows = []
    for source in documents:
        first, revised = revised_copy(source, work)
        for how, unit in (("whole", "1000000000"), ("sections", None)):
            run_env = {k: v for k, v in env.items() if k != "INGESTION_UNIT_CHARACTERS"}
            if unit:
                run_env["INGESTION_UNIT_CHARACTERS"] = unit
            tenant = f"{how}-{source.stem[:20]}".replace(".", "-").lower()
            runs = []
            for n in range(revisions + 1):
                path = revised if n % 2 else first
                wall = ingest(run_env, path, source.name, tenant=tenant)
                file = last_file(env["DATABASE_URL"])
                if file["status"] != "succeeded":
                    sys.exit(f"{source.name}, {how}, run {n}: {file['status']}: {file['error']}")
                stats = file["stats"]
                runs.append((source.name, how, "revision" if n else "first", wall,
                             stats["timings_ms"]["chunk"] / 1000, stats.get("sections", 1),
                             stats.get("sections_reused", 0), stats["chunks"], stats.get("embedded", 0)))
                steps = ", ".join(f"{step} {ms / 1000:.2f}" for step, ms in stats["timings_ms"].items())
                print(f"  {source.name}, {how}, {runs[-1][2]}: {wall:.1f} s ({steps}), {runs[-1][5]} section(s), "
                      f"{runs[-1][6]} reused; {encoded(stats)}", flush=True)
            rows.append(runs[0])
            rows.append(sorted(runs[1:], key=lambda row: row[3])[len(runs[1:]) // 2])
    return rows


def print_sections(rows: list[tuple]) -> None:
    print(f"\n{'document':30} {'chunked':9} {'version':9} {'wall s':>7} {'chunk s':>8} {'sections':>9} "
          f"{'reused':>7} {'chunks':>7} {'encoded':>8}")
    for name, how, version, wall, chunk_s, count, reused, chunks, embedded in rows:
        print(f"{name:30} {how:9} {version:9} {wall:7.1f} {chunk_s:8.2f} {count:9} {reused:7} {chunks:7} "
              f"{embedded:8}")


UNIT_RUNS = (("unsplit, 1 core", "0", "1", "1000000"), ("units, 1 core", "0", "1", None),
             ("units, 2 cores, 2 lanes", "0,1", "2", None))


def measure_units(env: dict, documents: list[Path]) -> list[tuple]:
    """Each document ingested as a new document under each of UNIT_RUNS: (document, label, wall s, extract s,
    pages, units)."""
    database_url = env["DATABASE_URL"]
    rows = []
    for document in documents:
        for n, (label, cores, lanes, unit_pages) in enumerate(UNIT_RUNS):
            run_env = {**env, "INGESTION_BATCH_LANES": lanes}
            if unit_pages:
                run_env["INGESTION_UNIT_PAGES"] = unit_pages
            wall = ingest(run_env, document, f"{document.stem}-{n}", cores)
            file = last_file(database_url)
            if file["status"] != "succeeded":
                sys.exit(f"{document.name}, {label}: {file['status']}: {file['error']}")
            stats = file["stats"]
            rows.append((document.name, label, wall, stats["timings_ms"]["extract"] / 1000, stats["pages"],
                         stats.get("units", 1)))
            print(f"  {document.name}, {label}: {wall:.1f} s, extract {rows[-1][3]:.2f} s", flush=True)
    return rows


def print_units(rows: list[tuple]) -> None:
    print(f"\n{'document':22} {'run':26} {'wall s':>7} {'extract s':>10} {'s/page':>7} {'units':>6}")
    for name, label, wall, extract_s, pages, unit_count in rows:
        print(f"{name:22} {label:26} {wall:7.1f} {extract_s:10.2f} {extract_s / pages:7.3f} {unit_count:6}")
    for name in dict.fromkeys(r[0] for r in rows):
        unsplit, one, two = (r for r in rows if r[0] == name)
        print(f"{name}: extract step with 2 workers / 1 worker = {two[3] / one[3]:.2f} (wall {two[2] / one[2]:.2f}); "
              f"cost of splitting (units / unsplit, 1 core) = {one[3] / unsplit[3]:.2f}")


class CeleryWorkers:
    """``count`` `ingestion-pipeline worker` processes, worker i pinned to core i, and a redis-server broker."""

    def __init__(self, env: dict, work: Path, count: int, redis_url: str | None = None) -> None:
        from ingestion_pipeline.core.redis_server import RedisServer, free_port

        # a broker of their own, unless the deployment they serve has one (``redis_url``: not stopped here)
        self.redis = None if redis_url else RedisServer(work / f"redis-{count}", port=free_port()).start()
        self.env = {**env, "INGESTION_EXECUTOR": "celery", "REDIS_URL": redis_url or self.redis.url}
        cli = str(Path(sys.executable).parent / "ingestion-pipeline")
        self.procs = [subprocess.Popen(["taskset", "-c", str(i), cli, "worker", "--concurrency", "1", "--name",
                                        f"bench{i}@%h"], env=self.env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True) for i in range(count)]

    def stop(self) -> None:
        import signal

        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.redis is not None:
            self.redis.stop()


def measure_celery(env: dict, work: Path, documents: list[Path], revision: Path | None = None) -> list[tuple]:
    """Each document on 1 and on 2 pinned workers (units), and unsplit on 1: (document, label, wall s, extract
    makespan s, units' summed read s, pages, units). With ``revision``, the last document's revision under the same
    key on the two warm workers, last: (name, "revision, 2 workers", wall s, extract s, OCR read, reused, steps)."""
    database_url = env["DATABASE_URL"]
    warm = work / "warm.md"
    warm.write_text("# Warm-up\n\n" + " ".join(f"Sentence {i} of the warm-up." for i in range(60)) + "\n")
    rows = []
    for count, label, unit_pages in ((1, "unsplit, 1 worker", "1000000"), (1, "units, 1 worker", None),
                                     (2, "units, 2 workers", None)):
        # the workers plan and read the units: the unit size is theirs
        workers = CeleryWorkers({**env, **({"INGESTION_UNIT_PAGES": unit_pages} if unit_pages else {})}, work, count)
        try:
            run_env = workers.env
            slug = "-".join(label.replace(",", "").split())  # a document key: no spaces
            for i in range(2 * count):  # every worker process loads the model (a run has one embedding step)
                ingest(run_env, warm, f"warm-{slug}-{i}")
            for document in documents:
                wall = ingest(run_env, document, f"{document.stem}-{slug}")
                file = last_file(database_url)
                if file["status"] != "succeeded":
                    sys.exit(f"{document.name}, {label}: {file['status']}: {file['error']}")
                stats = file["stats"]
                rows.append((document.name, label, wall, stats["timings_ms"]["extract"] / 1000,
                             stats.get("units_extract_ms", stats["timings_ms"]["extract"]) / 1000, stats["pages"],
                             stats.get("units", 1)))
                print(f"  {document.name}, {label}: {wall:.1f} s, extract {rows[-1][3]:.2f} s "
                      f"(units' read time {rows[-1][4]:.2f} s)", flush=True)
            if revision is not None and count == 2:  # warm workers: the model loaded, the code imported
                wall = ingest(run_env, revision, f"{documents[-1].stem}-{slug}")
                stats = last_file(database_url)["stats"]
                rows.append((revision.name, "revision, 2 workers", wall, stats["timings_ms"]["extract"] / 1000,
                             stats.get("ocr_pages_read", 0), stats.get("ocr_pages_reused", 0),
                             stats["timings_ms"]))
                print(f"  {revision.name}, revision on 2 workers: {wall:.1f} s", flush=True)
        finally:
            workers.stop()
    return rows


def measure_celery_revision(env: dict, work: Path, first: Path, revised: Path, rounds: int) -> list[tuple]:
    """On two warm pinned workers, ``rounds`` times in a tenant of its own: the scan's first version, then its
    revision under the same key: (round, first s, revision s, the revision's steps' own seconds)."""
    database_url = env["DATABASE_URL"]
    warm = work / "warm.md"
    warm.write_text("# Warm-up\n\n" + " ".join(f"Sentence {i} of the warm-up." for i in range(60)) + "\n")
    workers = CeleryWorkers(env, work, 2)
    rows = []
    try:
        for i in range(4):  # every worker process loads the model (a run has one embedding step)
            ingest(workers.env, warm, f"warm-{i}")
        for n in range(1, rounds + 1):
            run_env = workers.env
            tenant = f"round{n}"  # a tenant of its own: no page's text reused from an earlier round
            first_wall = ingest(run_env, first, "manual.pdf", tenant=tenant)
            sessions = sessions_opened(database_url)
            wall = ingest(run_env, revised, "manual.pdf", tenant=tenant)
            sessions = sessions_opened(database_url) - sessions
            file = last_file(database_url)
            if file["status"] != "succeeded":
                sys.exit(f"revision, round {n}: {file['status']}: {file['error']}")
            own = sum(file["stats"]["timings_ms"].values()) / 1000
            rows.append((n, first_wall, wall, own))
            print(f"  round {n}: first version {first_wall:.1f} s, revision {wall:.1f} s "
                  f"({wall / first_wall:.0%}; its steps' own time {own:.1f} s; Postgres opened {sessions} sessions "
                  f"during the revision); {encoded(file['stats'])}", flush=True)
            print_step_breakdown(database_url, wall)
    finally:
        workers.stop()
    return rows


# Per step of the latest run, from Dagster's event log: when the run's process sent it, when a worker began it
# (its instance, job and plan built), when the step's own code started and ended.
_STEP_EVENTS_SQL = """
WITH latest AS (SELECT run_id, create_timestamp FROM runs ORDER BY create_timestamp DESC LIMIT 1)
SELECT e.step_key, e.dagster_event_type AS kind, e.timestamp,
       coalesce(nullif(e.event::json->>'user_message', ''), e.event::json->'dagster_event'->>'message') AS message,
       latest.create_timestamp AS created
  FROM event_logs e JOIN latest ON latest.run_id = e.run_id
 ORDER BY e.id
"""


def print_step_breakdown(database_url: str, wall: float) -> None:
    """Where the latest run's seconds went between its steps: for each step, sent -> begun on a worker (the task's
    trip and the worker's instance, job and plan), begun -> the step's code started, the step's code, and its end
    -> the next step sent (the run's process noticing it)."""
    import psycopg

    from ingestion_pipeline.core.embedded_postgres import embedded_dagster_url

    with psycopg.connect(embedded_dagster_url(database_url).replace("+psycopg2", "")) as conn:
        events = conn.execute(_STEP_EVENTS_SQL).fetchall()
    if not events:
        return
    marks: dict[str, dict[str, float]] = {}
    run_start = run_end = None
    for step, kind, at, message, _created in events:
        t = at.timestamp()
        if kind in ("RUN_START", "PIPELINE_START"):  # stored under the older names
            run_start = t
        elif kind in ("RUN_SUCCESS", "RUN_FAILURE", "PIPELINE_SUCCESS", "PIPELINE_FAILURE"):
            run_end = t
        if not step:
            continue
        m = marks.setdefault(step, {})
        if kind == "ENGINE_EVENT" and message and message.startswith("Submitting celery task"):
            m.setdefault("sent", t)
        elif kind == "ENGINE_EVENT" and message and "Executing steps" in message:
            m.setdefault("begun", t)
        elif kind == "STEP_START":
            m.setdefault("started", t)
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            m["ended"] = t
    steps = sorted((m for m in marks.values() if {"sent", "begun", "started", "ended"} <= m.keys()),
                   key=lambda m: m["sent"])
    sends = sorted(m["sent"] for m in steps)
    totals = {"trip": 0.0, "setup": 0.0, "code": 0.0, "noticed": 0.0}
    for m in steps:
        later = [t for t in sends if t >= m["ended"]]
        totals["trip"] += m["begun"] - m["sent"]
        totals["setup"] += m["started"] - m["begun"]
        totals["code"] += m["ended"] - m["started"]
        totals["noticed"] += (later[0] - m["ended"]) if later else ((run_end or m["ended"]) - m["ended"])
    n = len(steps)
    print(f"    {n} Celery steps; summed over them: sent -> begun on a worker {totals['trip']:.1f} s, begun -> "
          f"the step's code {totals['setup']:.1f} s, the code {totals['code']:.1f} s, ended -> the next sent "
          f"{totals['noticed']:.1f} s (the steps overlap where they fan out)", flush=True)
    if run_start and run_end:
        first_sent = min(sends) if sends else run_start
        print(f"    the run {run_end - run_start:.1f} s of the command's {wall:.1f} s (its first step sent "
              f"{first_sent - run_start:.1f} s after it started; the rest before it is the command's start)",
              flush=True)


def chunk_makespan(database_url: str) -> tuple[float, int]:
    """The latest run's chunking, from its first ``document_chunks`` step begun to its last one ended, and how many
    steps it took."""
    import psycopg

    from ingestion_pipeline.core.embedded_postgres import embedded_dagster_url

    with psycopg.connect(embedded_dagster_url(database_url).replace("+psycopg2", "")) as conn:
        events = conn.execute(_STEP_EVENTS_SQL).fetchall()
    starts = [at.timestamp() for step, kind, at, _, _ in events
              if kind == "STEP_START" and (step or "").startswith("document_chunks")]
    ends = [at.timestamp() for step, kind, at, _, _ in events
            if kind == "STEP_SUCCESS" and (step or "").startswith("document_chunks")]
    return max(ends) - min(starts), len(starts)


CHUNK_RUNS = ((1, "whole, 1 worker", "1000000000"), (1, "parts, 1 worker", None), (2, "parts, 2 workers", None),
              (2, "half parts, 2 workers", "500000"))


def measure_celery_sections(env: dict, work: Path, documents: list[Path]) -> list[tuple]:
    """Each document chunked on Celery workers pinned to a core each: whole (``INGESTION_CHUNK_PART_CHARACTERS``
    above any file) on 1 worker, in parts on 1 and on 2 workers, in parts of half the default size on 2. Every
    document is ingested once first (in the process) in the same tenant, so that the measured runs reuse its
    vectors: the runs are chunking, staging and promotion. Rows: (document, label, wall s, chunk makespan s, chunk
    steps, summed chunking s, parts)."""
    database_url = env["DATABASE_URL"]
    for document in documents:
        ingest(env, document, f"{document.stem}-prime", tenant="chunking")
    warm = work / "warm.md"
    warm.write_text("# Warm-up\n\n" + " ".join(f"Sentence {i} of the warm-up." for i in range(60)) + "\n")
    rows = []
    for count, label, part_chars in CHUNK_RUNS:
        workers = CeleryWorkers({**env, **({"INGESTION_CHUNK_PART_CHARACTERS": part_chars} if part_chars else {})},
                                work, count)
        try:
            slug = "-".join(label.replace(",", "").split())
            for i in range(2 * count):
                ingest(workers.env, warm, f"warm-{slug}-{i}", tenant="chunking")
            for document in documents:
                wall = ingest(workers.env, document, f"{document.stem}-{slug}", tenant="chunking")
                file = last_file(database_url)
                if file["status"] != "succeeded":
                    sys.exit(f"{document.name}, {label}: {file['status']}: {file['error']}")
                makespan, steps = chunk_makespan(database_url)
                stats = file["stats"]
                rows.append((document.name, label, wall, makespan, steps, stats["timings_ms"]["chunk"] / 1000,
                             stats.get("chunk_parts", 1)))
                print(f"  {document.name}, {label}: {wall:.1f} s, chunking {makespan:.2f} s in {steps} step(s), "
                      f"{rows[-1][5]:.2f} s of chunking summed", flush=True)
        finally:
            workers.stop()
    return rows


def print_celery_sections(rows: list[tuple]) -> None:
    print(f"\nchunking on Celery workers, one core each (vectors reused)\n{'document':30} {'run':22} {'wall s':>7} "
          f"{'chunk s':>8} {'steps':>6} {'summed s':>9} {'parts':>6}")
    for name, label, wall, makespan, steps, summed, parts in rows:
        print(f"{name:30} {label:22} {wall:7.1f} {makespan:8.2f} {steps:6} {summed:9.2f} {parts:6}")
    for name in dict.fromkeys(r[0] for r in rows):
        whole, one, two = (r for r in rows if r[0] == name and r[1] != "half parts, 2 workers")
        print(f"{name}: chunking makespan in parts on 2 workers / whole on 1 = {two[3] / whole[3]:.2f}, / parts on 1 "
              f"= {two[3] / one[3]:.2f}; wall {two[2] / whole[2]:.2f}")


def print_celery(rows: list[tuple]) -> None:
    revision = [r for r in rows if r[1] == "revision, 2 workers"]
    rows = [r for r in rows if r[1] != "revision, 2 workers"]
    print(f"\nCelery workers, one core each\n{'document':22} {'run':20} {'wall s':>7} {'extract s':>10} "
          f"{'units read s':>13} {'s/page':>7} {'units':>6}")
    for name, label, wall, makespan, summed, pages, unit_count in rows:
        print(f"{name:22} {label:20} {wall:7.1f} {makespan:10.2f} {summed:13.2f} {summed / pages:7.3f} "
              f"{unit_count:6}")
    for name in dict.fromkeys(r[0] for r in rows):
        unsplit, one, two = (r for r in rows if r[0] == name)
        print(f"{name}: extract makespan 2 workers / 1 worker = {two[3] / one[3]:.2f} (wall {two[2] / one[2]:.2f}); "
              f"cost of splitting (units' read time / unsplit, 1 worker) = {one[4] / unsplit[4]:.2f}")
    for name, _, wall, extract_s, read, reused, timings in revision:
        first = [r for r in rows if r[1] == "units, 2 workers"][-1]
        steps = ", ".join(f"{step} {ms / 1000:.1f}" for step, ms in timings.items())
        print(f"{name} on the two warm workers, same key as {first[0]}: {wall:.1f} s = {wall / first[2]:.0%} of its "
              f"first ingest ({first[2]:.1f} s); extract {extract_s:.2f} s = {extract_s / first[3]:.0%}; OCR read "
              f"{read}, reused {reused} (steps, s: {steps})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--changed", type=int, default=2)
    parser.add_argument("--revisions", type=int, default=1,
                        help="revisions ingested in turn (the two versions alternating under the same key); the "
                             "median is reported")
    parser.add_argument("--units", action="store_true", help="also measure units side by side (1 vs 2 cores)")
    parser.add_argument("--celery", action="store_true", help="also measure units on 1 vs 2 pinned Celery workers "
                        "(with --sections: only the long text and DOCX chunked whole and in parts on Celery)")
    parser.add_argument("--celery-revision", type=int, default=0, metavar="ROUNDS",
                        help="only the scan's first version and revision on two warm Celery workers, ROUNDS times")
    parser.add_argument("--dev", action="store_true",
                        help="only the scan and its revisions, through a running `ingestion-pipeline dev`")
    parser.add_argument("--sections", action="store_true",
                        help="only the corpus's long text and DOCX and a revision of each (one sentence added), "
                             "chunked in sections and whole")
    parser.add_argument("--dev-celery-workers", type=int, default=0, metavar="N",
                        help="with --dev: the deployment on N Celery workers pinned to a core each")
    parser.add_argument("--corpus", default=os.environ.get("INGESTION_CORPUS_DIR")
                        or str(ROOT.parent / "shared" / "corpus"), help="the sample corpus (DA-619p.pdf)")
    args = parser.parse_args()

    if args.dev:
        rows = measure_dev(args.pages, args.changed, args.revisions, args.dev_celery_workers)
        where = f"`dev` on {args.dev_celery_workers} Celery workers" if args.dev_celery_workers else "through `dev`"
        print(f"\n{where:45} {'wall s':>8} {'extract s':>10} {'OCR read':>9} {'reused':>7}")
        for label, wall, extract_s, read, reused in rows:
            print(f"{label:45} {wall:8.1f} {extract_s:10.1f} {read:9} {reused:7}")
        print(f"\nrevision with pages reused: {rows[1][1] / rows[0][1]:.0%} of the first version's submit -> active; "
              f"extract step {rows[1][2] / rows[0][2]:.0%}")
        return
    work, env = scratch_environment("bench-big-")
    rows, unit_rows, celery_rows, poll_rows, section_rows, chunk_rows = [], [], [], [], [], []
    try:
        scan, revised = prepare(work, env, 2 if args.sections else args.pages, args.changed)
        if args.sections and args.celery:
            pass  # only chunking on Celery (below)
        elif args.sections:
            section_rows = measure_sections(env, work, [Path(args.corpus) / "documents" / name for name in
                                                        ("book-war-and-peace-1225p.txt", "handbook-872p.docx")],
                                            args.revisions)
        elif args.celery_revision:
            poll_rows = measure_celery_revision(env, work, scan, revised, args.celery_revision)
        else:
            rows = measure(env, scan, revised, args.revisions)
        big = [Path(args.corpus) / "documents" / "DA-619p.pdf", scan]
        if args.units:
            unit_rows = measure_units(env, big)
        if args.celery and args.sections:
            chunk_rows = measure_celery_sections(env, work, [
                Path(args.corpus) / "documents" / name for name in ("book-war-and-peace-1225p.txt",
                                                                    "handbook-872p.docx")])
        elif args.celery:
            celery_rows = measure_celery(env, work, big, revised)
    finally:  # the throwaway data folder's own Postgres, then the folder
        from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

        stop_embedded_postgres(work / "data" / "pgdata")
        shutil.rmtree(work, ignore_errors=True)
    if section_rows:
        print_sections(section_rows)
    if chunk_rows:
        print_celery_sections(chunk_rows)
    if poll_rows:
        print("\nthe scan's revision on two warm Celery workers")
        print(f"{'round':>7} {'first s':>8} {'revision s':>11} {'share':>6} {'steps own s':>12}")
        for n, first_wall, wall, own in poll_rows:
            print(f"{n:7} {first_wall:8.1f} {wall:11.1f} {wall / first_wall:6.0%} {own:12.1f}")
    if rows:
        print(f"\n{'':45} {'wall s':>8} {'extract s':>10} {'OCR read':>9} {'reused':>7}")
        for label, wall, extract_s, read, reused in rows:
            print(f"{label:45} {wall:8.1f} {extract_s:10.1f} {read:9} {reused:7}")
        first_wall = rows[0][1]
        print(f"\nrevision with pages reused: {rows[1][1] / first_wall:.0%} of the first ingest's wall time "
              f"(without reuse: {rows[2][1] / first_wall:.0%}); extract step {rows[1][2] / rows[0][2]:.0%} "
              f"(without reuse: {rows[2][2] / rows[0][2]:.0%})")
    if unit_rows:
        print_units(unit_rows)
    if celery_rows:
        print_celery(celery_rows)


if __name__ == "__main__":
    main()
