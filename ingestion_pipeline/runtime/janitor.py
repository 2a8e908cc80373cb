"""The janitor: re-surfaces work that a dead worker or a lost launch left behind.

A duty of the intake service (`ingestion-pipeline intake`, every INGESTION_JANITOR_INTERVAL_SECONDS: each
round that recovered something is a line of its log), on demand as ``ledger_janitor_job`` (a run in the UI),
and at the start of every `ingestion-pipeline process`. Not a sensor: a sensor plans, and marking runs
failed is work; and not a run launched by a sensor either, because the runs it must fail may be the ones
holding every slot of the run queue (``max_concurrent_runs``), where its own run would wait behind them.

1. a Dagster run still STARTED whose worker stopped beating (SIGKILL, out of memory) is marked failed,
   so Dagster's run retries continue it (daemon runs) or its work is handed back (`process` runs);
2. rows whose lease expired go back to the queue as a failed attempt (or dead_letter after the last),
   unless a Dagster retry of their run is about to continue them;
3. queued work that no run picked up for ``INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS`` (1 h) gets a new
   launch generation, so the sensors launch its batch again;
4. units of big PDFs whose reader stopped renewing its lease are free to be read again;
5. heartbeats of runs that are over are forgotten;
6. while no run is in progress, up to ``BACKLOG_PER_ROUND`` promoted vectors that a killed run left outside their
   HNSW graph are put into it (``vector_backlog.py``): searchable already, they cost their tenant's every search
   until then, and no run's promotion step would take them before the next batch.
"""


import time
from dataclasses import dataclass, field

import dagster as dg

from ingestion_pipeline.core import leases, ledger, step_values
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, TABLES
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.documents import file_ledger, search, units, vector_backlog, vector_index
from ingestion_pipeline.runtime.dagster_internals import free_pool_slots, mark_run_failed
from ingestion_pipeline.runtime.finalization import owner_of, retry_follows, table_for_run

IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
STARTUP_GRACE_SECONDS = 60.0
BACKLOG_PER_ROUND = 2_000  # vectors a round indexes: a few seconds at a million, the service's other duties wait


@dataclass
class JanitorReport:
    dead_runs: list[str] = field(default_factory=list)
    expired: list[dict] = field(default_factory=list)  # ledger rows handed back (or dead-lettered)
    relaunched: list[str] = field(default_factory=list)  # partitions whose launch generation went up
    stale_units: list[dict] = field(default_factory=list)  # units of big PDFs whose reader stopped renewing
    indexed: int = 0  # promoted vectors put into their HNSW graph
    left_to_index: int = 0
    graphs_built: list[tuple[str, int]] = field(default_factory=list)  # large tenants' graphs (vector_index.py)

    @property
    def is_empty(self) -> bool:
        return not (self.dead_runs or self.expired or self.relaunched or self.stale_units or self.indexed
                    or self.graphs_built)

    def describe(self) -> str:
        if self.is_empty:
            return "nothing to recover"
        parts = []
        if self.dead_runs:
            parts.append(f"{len(self.dead_runs)} run(s) with a dead worker marked failed")
        if self.expired:
            dead = sum(1 for r in self.expired if r["status"] == "dead_letter")
            parts.append(f"{len(self.expired)} expired claim(s) handed back ({dead} dead-lettered)")
        if self.stale_units:
            parts.append(f"{len(self.stale_units)} unit(s) whose reader stopped renewing its lease handed back: "
                         + ", ".join(f"file {u['file_id']} pages {u['first_page']}-{u['last_page']}"
                                     for u in self.stale_units[:5]))
        if self.relaunched:
            parts.append(f"{len(self.relaunched)} batch(es) relaunched: {', '.join(self.relaunched[:5])}")
        if self.indexed:
            parts.append(f"{self.indexed:,} promoted vector(s) put into their HNSW graph "
                         f"({self.left_to_index:,} still waiting)")
        if self.graphs_built:
            parts.append(f"{len(self.graphs_built)} large tenant(s)' HNSW graph built: "
                         + ", ".join(f"{t} ({d})" for t, d in self.graphs_built[:5]))
        return "; ".join(parts)


def _records(instance: dg.DagsterInstance, statuses: list[dg.DagsterRunStatus],
             limit: int | None = None) -> list[dg.RunRecord]:
    """Runs in these states that claim ledger rows (the two jobs, or their assets materialised from the UI)."""
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=statuses), limit=limit)
    return [r for r in records if table_for_run(r.dagster_run, instance) is not None]


def fail_runs_with_dead_workers(instance: dg.DagsterInstance, db: Database, lease_seconds: float) -> list[str]:
    """STARTED runs whose worker stopped beating (or never beat, long after starting) are marked failed."""
    started = _records(instance, [dg.DagsterRunStatus.STARTED])
    if not started:
        return []
    with db.connection() as conn:
        beats = leases.last_beats(conn, [r.dagster_run.run_id for r in started])
    now = time.time()
    dead = []
    for record in started:
        run = record.dagster_run
        beat = beats.get(run.run_id)
        if beat is not None:
            silent = float(beat["seconds_since"])
        else:
            silent = now - (record.start_time or record.create_timestamp.timestamp()) - STARTUP_GRACE_SECONDS
        if silent <= lease_seconds:
            continue
        mark_run_failed(instance, run, f"the run worker is lost: no heartbeat for {silent:.0f} s (killed, out of "
                                        "memory, or its machine is gone); its claims are handed back")
        # its steps' pool slots (the embedding pool's) go back now: the daemon's run monitoring would free them
        # later, and `process` has no daemon
        free_pool_slots(instance, run.run_id)
        dead.append(run.run_id)
    return dead


def _owners_to_keep(instance: dg.DagsterInstance, lease_seconds: float) -> set[str]:
    """Owners whose rows are being continued: runs in progress, and failed runs a Dagster retry follows."""
    keep = {owner_of(r.dagster_run) for r in _records(instance, IN_PROGRESS)}
    grace = max(lease_seconds, 120.0)
    for record in _records(instance, [dg.DagsterRunStatus.FAILURE], limit=200):
        ended = record.end_time or 0
        if retry_follows(record.dagster_run) and time.time() - ended < grace:
            keep.add(owner_of(record.dagster_run))
    return keep


def run_janitor(instance: dg.DagsterInstance, db: Database, policy: ReliabilitySettings, *,
                backlog_per_round: int = BACKLOG_PER_ROUND, index_nice: int = vector_backlog.SWEEP_NICE
                ) -> JanitorReport:
    """One round (the module's docstring); ``backlog_per_round``: vectors it may index (0: none), on a backend
    lowered to ``index_nice``."""
    report = JanitorReport(dead_runs=fail_runs_with_dead_workers(instance, db, policy.lease_seconds))
    keep = _owners_to_keep(instance, policy.lease_seconds)
    running = _records(instance, IN_PROGRESS)
    in_flight = {r.dagster_run.tags.get("dagster/partition") for r in running} - {None}
    with db.transaction() as conn:
        for t in TABLES:
            expired = ledger.expire_leases(conn, t, policy, keep_owners=keep)
            if t is DOCUMENT_FILES:
                file_ledger.report(conn, expired)
            report.expired += expired
            report.relaunched += ledger.relaunch_stale_queued(
                conn, t, older_than_seconds=policy.relaunch_queued_after_seconds, keep_partitions=in_flight)
        report.stale_units = units.hand_back_stale(conn)
        leases.forget_older_than(conn, max(policy.lease_seconds * 10, 3600.0))
        step_values.drop_older_than(conn)
    if backlog_per_round and not running:  # a run in progress sweeps the whole backlog at its promotion step
        report.indexed, report.left_to_index = vector_backlog.index_up_to(db, backlog_per_round, nice=index_nice)
    if not running:  # a graph an upgrade left to build, or whose build failed (a promotion builds its tenant's)
        report.graphs_built = vector_index.ensure_graphs(db, search.EXACT_SEARCH_MAX_CHUNKS).built
    return report
