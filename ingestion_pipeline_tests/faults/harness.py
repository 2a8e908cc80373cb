"""Fault injection: run the real `ingestion-pipeline process` in a subprocess, SIGKILL it at chosen or
random points, recover, and check that nothing was lost, duplicated or served half-done.

Used by the tests in this folder and by ``benchmarks/fault_soak.py``. A kill is real: ``SIGKILL`` to
the process group (the run worker and its extraction worker). A kill at a *failpoint* (see
``ingestion_pipeline/core/failpoints.py``) lands exactly there: inside the promotion transaction,
between two committed embedding units, while the model loads, while a file is extracted.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

CLI = str(Path(sys.executable).parent / "ingestion-pipeline")
DOCUMENT_POINTS = ("model.load", "extract.file", "embed.unit", "promote.transaction")
METRIC_POINTS = ("metrics.stage", "metrics.promote")


@dataclass
class Kill:
    point: str  # a failpoint, or "after N.N s"
    reached: bool  # False: the process finished before the point (nothing left to do)
    seconds: float


@dataclass
class SoakReport:
    kills: list[Kill] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)  # seconds from a kill to all work settled
    violations: list[str] = field(default_factory=list)
    final_states: dict[str, int] = field(default_factory=dict)


class FaultHarness:
    def __init__(self, database_url: str, env: dict[str, str], workdir: Path) -> None:
        self.database_url = database_url
        self.env = env
        self.markers = workdir / "failpoints"
        self.markers.mkdir(parents=True, exist_ok=True)
        self.logs = workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self._n = 0

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *args], capture_output=True, text=True, env={**self.env, **(env or {})},
                              timeout=timeout)

    def _marker(self, point: str) -> Path | None:
        return next(self.markers.glob(f"*.{point}"), None)

    def kill_process(self, *, point: str | None = None, after: float | None = None, timeout: float = 120) -> Kill:
        """Start `process`; SIGKILL it when it reaches ``point`` or ``after`` seconds (whichever is given)."""
        for marker in self.markers.glob("*"):
            marker.unlink()
        env = dict(self.env)
        if point:
            env.update(INGESTION_FAILPOINT=point, INGESTION_ALLOW_FAILPOINTS="1",
                       INGESTION_FAILPOINT_DIR=str(self.markers))
        self._n += 1
        log = (self.logs / f"process-{self._n}.log").open("w")
        started = time.monotonic()
        proc = subprocess.Popen([CLI, "process"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        reached = False
        deadline = started + (after if after is not None else timeout)
        while time.monotonic() < deadline and proc.poll() is None:
            if point and self._marker(point) is not None:
                reached = True
                break
            time.sleep(0.05)
        if after is not None and proc.poll() is None:
            reached = True
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        log.close()
        if reached:  # the killed worker's leases run out before anything else may take its files
            time.sleep(float(self.env.get("INGESTION_LEASE_SECONDS", "2")) + 0.3)
        return Kill(point or f"after {after:.1f} s", reached, time.monotonic() - started)

    def converge(self, rounds: int = 4) -> float:
        """Run `process` until no work is left unfinished; seconds it took."""
        started = time.monotonic()
        for _ in range(rounds):
            result = self.cli("process")
            if result.returncode not in (0, 1):
                raise AssertionError(f"process exited {result.returncode}:\n{result.stderr[-3000:]}")
            if not unfinished(self.database_url):
                return time.monotonic() - started
            time.sleep(float(self.env.get("INGESTION_LEASE_SECONDS", "2")) + 0.5)
        raise AssertionError(f"work still unfinished after {rounds} rounds: {unfinished(self.database_url)}")


def _query(url: str, sql: str, *params) -> list[dict]:
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def unfinished(url: str) -> list[dict]:
    return _query(url, """SELECT 'document' AS kind, file_id AS id, status FROM ingestion_runs
                           WHERE status IN ('queued', 'running')
                          UNION ALL SELECT 'metric_upload', upload_id, status FROM data_uploads
                           WHERE status IN ('pending', 'processing', 'staging_complete', 'promoting')""")


def invariant_violations(url: str) -> list[str]:
    """What must hold once work has settled (empty list: all good)."""
    problems = []
    for r in _query(url, "SELECT file_id, status, error, error_code FROM ingestion_runs"):
        if r["status"] not in ("succeeded", "failed", "dead_letter", "canceled"):
            problems.append(f"file {r['file_id']} is still {r['status']}")
        if r["status"] in ("failed", "dead_letter") and not (r["error"] and r["error_code"]):
            problems.append(f"file {r['file_id']} is {r['status']} without a reason")
    for r in _query(url, """SELECT d.doc_id, count(*) FILTER (WHERE v.is_active) AS active FROM documents d
                             JOIN document_versions v USING (doc_id) GROUP BY d.doc_id"""):
        if r["active"] != 1:
            problems.append(f"document {r['doc_id']} has {r['active']} active versions")
    # every version keeps its chunks and vectors; the full-text rows are the served versions' only (sql/041)
    for r in _query(url, """SELECT v.version_id, v.chunk_count, v.is_active, count(c.chunk_id) AS chunks,
                                   count(e.chunk_id) AS embeddings, count(f.chunk_id) AS fts
                              FROM document_versions v LEFT JOIN chunks c USING (version_id)
                              LEFT JOIN chunk_embeddings e USING (chunk_id) LEFT JOIN chunk_fts f USING (chunk_id)
                             GROUP BY v.version_id, v.chunk_count, v.is_active"""):
        served = r["chunk_count"] if r["is_active"] else 0
        if not (r["chunk_count"] == r["chunks"] == r["embeddings"] and r["fts"] == served):
            problems.append(f"version {r['version_id']}: {r['chunk_count']} chunks declared, {r['chunks']} stored, "
                            f"{r['embeddings']} embeddings, {r['fts']} text vectors")
    # the totals every search reads (sql/040) say what counting the active versions says, however the writes ended
    for r in _query(url, """WITH kept AS (
                                 SELECT tenant_id, kind, name, sum(versions) AS versions, sum(chunks) AS chunks
                                   FROM tenant_serving_totals WHERE kind <> 'changes' GROUP BY 1, 2, 3
                                 HAVING sum(versions) <> 0 OR sum(chunks) <> 0),
                             counted AS (
                                 SELECT tenant_id, 'model' AS kind, embedding_model AS name, count(*) AS versions,
                                        sum(chunk_count) AS chunks FROM document_versions WHERE is_active GROUP BY 1, 3
                                 UNION ALL
                                 SELECT tenant_id, 'language', cfg, count(*), 0
                                   FROM document_versions, unnest(text_search_configs) AS cfg
                                  WHERE is_active GROUP BY 1, 3)
                             SELECT coalesce(k.tenant_id, c.tenant_id) AS tenant_id, coalesce(k.kind, c.kind) AS kind,
                                    coalesce(k.name, c.name) AS name, k.versions AS kept, c.versions AS counted,
                                    k.chunks AS kept_chunks, c.chunks AS counted_chunks
                               FROM kept k FULL JOIN counted c ON c.tenant_id = k.tenant_id AND c.kind = k.kind
                                AND c.name IS NOT DISTINCT FROM k.name
                              WHERE k.versions IS DISTINCT FROM c.versions OR k.chunks IS DISTINCT FROM c.chunks"""):
        problems.append(f"tenant {r['tenant_id']}'s {r['kind']} {r['name']}: totals say {r['kept']} version(s), "
                        f"{r['kept_chunks']} chunk(s); the active versions are {r['counted']}, {r['counted_chunks']}")
    # the words' document frequencies search reads (sql/047, folded or not) are the served rows' words counted afresh
    for r in _query(url, """WITH kept AS (
                                 SELECT tenant_id, text_search_config, lexeme, sum(chunks) AS chunks FROM (
                                     SELECT tenant_id, text_search_config, lexeme, chunks FROM tenant_word_counts
                                     UNION ALL
                                     SELECT tenant_id, text_search_config, lexeme, chunks FROM tenant_word_changes) w
                                  GROUP BY 1, 2, 3 HAVING sum(chunks) <> 0),
                             counted AS (
                                 SELECT f.tenant_id, f.text_search_config, w.lexeme, count(*) AS chunks
                                   FROM chunk_fts f, unnest(tsvector_to_array(f.tsv)) AS w(lexeme) GROUP BY 1, 2, 3)
                             SELECT tenant_id, lexeme, k.chunks AS kept, c.chunks AS counted
                               FROM kept k FULL JOIN counted c USING (tenant_id, text_search_config, lexeme)
                              WHERE k.chunks IS DISTINCT FROM c.chunks LIMIT 5"""):
        problems.append(f"tenant {r['tenant_id']}'s word {r['lexeme']!r}: counts say {r['kept']} chunk(s), "
                        f"its served rows {r['counted']}")
    for r in _query(url, """SELECT doc_id, content_hash, pipeline_fingerprint, count(*) AS n FROM document_versions
                             GROUP BY 1, 2, 3 HAVING count(*) > 1"""):
        problems.append(f"document {r['doc_id']} was promoted {r['n']} times from the same content")
    for r in _query(url, """SELECT r.file_id FROM staging_documents s JOIN ingestion_runs r USING (file_id)
                             WHERE r.status IN ('succeeded', 'canceled')"""):
        problems.append(f"file {r['file_id']} finished but left staged data")
    for r in _query(url, "SELECT upload_id, status, error FROM data_uploads"):
        if r["status"] not in ("completed", "partial", "failed", "dead_letter", "canceled"):
            problems.append(f"upload {r['upload_id']} is still {r['status']}")
    for r in _query(url, """SELECT u.upload_id, u.status, count(e.event_id) AS events FROM data_uploads u
                             LEFT JOIN ingestion_events e USING (upload_id) GROUP BY u.upload_id, u.status"""):
        expected = 1 if r["status"] in ("completed", "partial") else 0
        if r["events"] != expected:
            problems.append(f"upload {r['upload_id']} ({r['status']}) has {r['events']} completion events")
    return problems


class ActiveVersionWatcher(threading.Thread):
    """Samples every document that has a version: at every moment exactly one must be active."""

    def __init__(self, url: str, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.violations: list[str] = []
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                with psycopg.connect(self.url, row_factory=dict_row, autocommit=True) as conn:
                    while not self._halt.is_set():
                        for r in conn.execute("""SELECT doc_id, count(*) FILTER (WHERE is_active) AS active
                                                   FROM document_versions GROUP BY doc_id""").fetchall():
                            if r["active"] != 1:
                                self.violations.append(f"document {r['doc_id']}: {r['active']} active versions")
                        self.samples += 1
                        time.sleep(self.interval)
            except psycopg.OperationalError:
                time.sleep(0.5)  # the database is being restarted by the test

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def kill_points(kills: int, rng: random.Random, points: tuple[str, ...] = DOCUMENT_POINTS) -> list[dict]:
    """A schedule of kills: every failpoint in turn, and a random delay between them."""
    schedule = []
    for i in range(kills):
        if i % (len(points) + 1) == len(points):
            schedule.append({"after": round(rng.uniform(1.5, 9.0), 1)})
        else:
            schedule.append({"point": points[i % (len(points) + 1)]})
    return schedule
