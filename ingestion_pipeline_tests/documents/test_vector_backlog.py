"""Promoted vectors join their HNSW graph after the promotion (sql/044, ``vector_backlog.py``): until then search
ranks them exactly beside the index's answer, for their own tenant only; the backlog is taken on several
connections without a vector taken twice; a database from before upgrades with every vector in its index."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

import numpy as np
import pytest

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.migrations import apply_migrations
from ingestion_pipeline.documents import search, vector_backlog
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.documents.vector_index import build_graph, graph_name, of_dimension
from ingestion_pipeline_tests.documents.test_search import tenant_beside
from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before

pytestmark = pytest.mark.integration


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def _through_the_index(db, monkeypatch) -> None:
    """Rank every tenant through its HNSW graph (as a large one is): each tenant's graph built, and the planner made
    to use it at a test's size."""
    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", 0)
    for row in db.execute("SELECT DISTINCT tenant_id, vector_dims(embedding) AS dim FROM chunk_embeddings").fetchall():
        build_graph(db, row["tenant_id"], row["dim"])
    db.execute("ANALYZE")
    db.execute("SET enable_seqscan = off")


def test_a_promoted_vector_is_found_before_it_is_indexed_and_after(db, database, monkeypatch):
    rng = np.random.default_rng(11)
    add_tenant_vectors(db, "acme", rng.normal(size=(300, 384)))  # in the graph already
    query = _unit(rng.normal(size=384))
    [fresh] = add_tenant_vectors(db, "acme", query[None, :] + rng.normal(scale=0.01, size=(1, 384)), indexed=False)
    _through_the_index(db, monkeypatch)
    assert vector_backlog.pending(db, "acme") == 1 and vector_backlog.pending(db, "other") == 0

    # outside the graph: the index's own scan cannot return it ...
    with db.transaction():
        rows = db.execute(of_dimension(search._VECTOR_ANN_SQL, 384),
                          {"tenant": "acme", "vector": query, "model": "m", "candidates": 10}).fetchall()
    assert fresh not in [r["chunk_id"] for r in rows]
    # ... and search finds it first all the same (ranked exactly beside the index's answer), reading the tenant's
    # unindexed rows through the backlog's partial index, not every row of the tenant
    with db.transaction():
        [[plan]] = db.execute(of_dimension("EXPLAIN (FORMAT JSON) " + search._VECTOR_BACKLOG_SQL, 384),
                              {"tenant": "acme", "vector": query, "model": "m", "candidates": 10, "nearest": 90}
                              ).fetchone().values()
    backlog_indexes = {r["name"] for r in db.execute(
        "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'chunk_embeddings_backlog'::regclass")}
    assert backlog_indexes & set(re.findall(r'"Index Name": "([^"]+)"', json.dumps(plan)))
    hits = hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=3, model="m")
    assert hits[0].chunk_id == fresh and hits[0].vector_rank == 1

    assert vector_backlog.index_backlog(database) == 1
    assert vector_backlog.pending(db) == 0
    with db.transaction():
        rows = db.execute(of_dimension(search._VECTOR_ANN_SQL, 384),
                          {"tenant": "acme", "vector": query, "model": "m", "candidates": 10}).fetchall()
    assert rows[0]["chunk_id"] == fresh  # in the graph now
    hits = hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=3, model="m")
    assert hits[0].chunk_id == fresh


def test_another_tenants_unindexed_vectors_are_never_returned(db, database, monkeypatch):
    rng = np.random.default_rng(12)
    query = _unit(rng.normal(size=384))
    mine = add_tenant_vectors(db, "acme", rng.normal(size=(50, 384)))
    # the same partition, nearer to the query than anything of acme's, not indexed yet
    beside = add_tenant_vectors(db, tenant_beside(db, "acme"), query + rng.normal(scale=0.01, size=(20, 384)),
                                indexed=False)
    _through_the_index(db, monkeypatch)
    hits = hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=10, model="m")
    assert hits and {h.chunk_id for h in hits} <= set(mine) and not {h.chunk_id for h in hits} & set(beside)


def test_an_inactive_versions_unindexed_vectors_are_not_returned(db, monkeypatch):
    rng = np.random.default_rng(13)
    query = _unit(rng.normal(size=384))
    mine = add_tenant_vectors(db, "acme", rng.normal(size=(40, 384)))
    old = add_tenant_vectors(db, "acme", query[None, :] + rng.normal(scale=0.01, size=(3, 384)), indexed=False)
    db.execute("UPDATE document_versions SET is_active = false WHERE version_id = "
               "(SELECT version_id FROM chunks WHERE chunk_id = %s)", (old[0],))
    _through_the_index(db, monkeypatch)
    hits = hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=5, model="m")
    assert hits and {h.chunk_id for h in hits} <= set(mine)


def test_a_large_tenant_with_no_backlog_asks_for_it_once_and_one_behind_inactive_rows_is_still_found(
        db, monkeypatch):
    """Each of the backlog's nearest rows comes back with whether it is active: none at all is known at once (one
    statement), and only a look that found too few active among as many rows as it looked at looks at every row."""
    import psycopg

    rng = np.random.default_rng(17)
    query = _unit(rng.normal(size=384))
    add_tenant_vectors(db, "acme", rng.normal(size=(200, 384)))
    _through_the_index(db, monkeypatch)
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def recording(self, query, params=None, **kwargs):
        sent.append(str(query))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=5, model="m")
    assert sum("NOT e.indexed" in q for q in sent) == 1

    # 100 unindexed rows of a replaced version nearer than one active unindexed row: more than the first look takes
    old = add_tenant_vectors(db, "acme", query[None, :] + rng.normal(scale=0.01, size=(100, 384)), indexed=False)
    db.execute("UPDATE document_versions SET is_active = false WHERE version_id = "
               "(SELECT version_id FROM chunks WHERE chunk_id = %s)", (old[0],))
    [fresh] = add_tenant_vectors(db, "acme", query[None, :] + rng.normal(scale=0.05, size=(1, 384)), indexed=False)
    sent.clear()
    hits = hybrid_search(db, tenant_id="acme", query="nothing matches this", query_vector=query, k=5, model="m")
    assert hits[0].chunk_id == fresh and not {h.chunk_id for h in hits} & set(old)
    assert sum("NOT e.indexed" in q for q in sent) == 2


def test_the_backlog_is_taken_on_several_connections_each_vector_once(db, database):
    rng = np.random.default_rng(14)
    for tenant in ("acme", "globex", "initech"):
        add_tenant_vectors(db, tenant, rng.normal(size=(700, 384)), indexed=False)
    assert vector_backlog.pending(db) == 2100
    reports: list[str] = []
    counts: list[int] = []
    # two sweeps at once (two runs' promotion steps), each on two connections, in batches of 100
    sweeps = [threading.Thread(target=lambda: counts.append(vector_backlog.index_backlog(
        database, connections=2, batch=100, sinks=[reports.append]))) for _ in range(2)]
    for sweep in sweeps:
        sweep.start()
    for sweep in sweeps:
        sweep.join()
    assert sum(counts) == 2100 and vector_backlog.pending(db) == 0
    assert any("/2,100 vectors" in r and "ETA" in r for r in reports)
    # every vector is in its partition's graph: the index's row count is the table's
    assert db.execute("SELECT count(*) AS n FROM chunk_embeddings WHERE indexed").fetchone()["n"] == 2100
    assert vector_backlog.index_backlog(database) == 0  # nothing left: no report, no work


def test_the_sweep_runs_on_lowered_backends_of_its_own_and_leaves_the_callers_pool_as_it_was(db, database,
                                                                                            monkeypatch):
    """The graph's insertions take the cores searches leave: every batch, the promotion step's sweep and the
    janitor's share, runs on a backend at nice 10 (``SWEEP_NICE``; the kernel's value read back while it runs); the
    caller's pool keeps its priority, and none of its connections is lowered."""
    from ingestion_pipeline_tests.core.test_cpu_priority import _nice_of_backend

    rng = np.random.default_rng(15)
    add_tenant_vectors(db, "acme", rng.normal(size=(300, 384)), indexed=False)
    seen: list[tuple[int, tuple[int, str]]] = []
    index_some = vector_backlog.index_some

    def observed(conn, batch=vector_backlog.BATCH):
        seen.append((conn.info.backend_pid, _nice_of_backend(conn)))
        return index_some(conn, batch)

    monkeypatch.setattr(vector_backlog, "index_some", observed)
    assert vector_backlog.index_up_to(database, 100) == (100, 200)  # the janitor's share
    assert vector_backlog.index_backlog(database, connections=2, batch=50) == 200  # a promotion step's sweep
    assert vector_backlog.pending(db) == 0
    assert vector_backlog.SWEEP_NICE == 10  # the default of INGESTION_INDEX_SWEEP_NICE
    assert len(seen) >= 5 and {nice for _, nice in seen} == {(10, "10")}
    with database.connection() as conn:
        assert _nice_of_backend(conn) == (0, "0") and conn.info.backend_pid not in {pid for pid, _ in seen}
    # the sweep's own connections are closed after: a lowered backend is never handed to other work
    lowered = sorted({pid for pid, _ in seen})
    deadline = time.monotonic() + 10
    while db.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = ANY(%s)", (lowered,)).fetchone()["n"]:
        assert time.monotonic() < deadline, f"the sweep's backends {lowered} are still connected"
        time.sleep(0.1)


def test_a_database_from_before_upgrades_with_every_vector_in_its_index(pg_server_url, tmp_path, monkeypatch):
    url = database_migrated_before(pg_server_url, tmp_path, "044")
    rng = np.random.default_rng(15)
    with connect(url, autocommit=True) as conn:
        acme = add_tenant_vectors(conn, "acme", rng.normal(size=(60, 384)))
        conn.execute("CREATE INDEX chunk_embeddings_hnsw_8 ON ONLY chunk_embeddings "
                     "USING hnsw ((embedding::vector(8)) vector_cosine_ops) WHERE vector_dims(embedding) = 8")
        tiny = add_tenant_vectors(conn, "tiny", rng.normal(size=(4, 8)))
        stored = {r["chunk_id"]: r["embedding"] for r in conn.execute("SELECT chunk_id, embedding::text FROM "
                                                                       "chunk_embeddings")}
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        assert vector_backlog.pending(conn) == 0
        assert {r["chunk_id"] for r in conn.execute("SELECT chunk_id FROM chunk_embeddings")} == set(acme + tiny)
        _through_the_index(conn, monkeypatch)
        definitions = {r["indexname"]: r["indexdef"] for r in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'chunk_embeddings%%hnsw%%'")}
        assert set(definitions) == {graph_name("acme", 384), graph_name("tiny", 8),
                                    "chunk_embeddings_hnsw_384", "chunk_embeddings_hnsw_8"}  # sql/052's empty names
        assert all("indexed" in d for d in definitions.values())
        query = np.asarray(json.loads(stored[acme[7]]), dtype=np.float32)
        with conn.transaction():
            [[plan]] = conn.execute(of_dimension("EXPLAIN (FORMAT JSON) " + search._VECTOR_ANN_SQL, 384),
                                    {"tenant": "acme", "vector": query, "model": "m", "candidates": 10}
                                    ).fetchone().values()
        assert graph_name("acme", 384) in json.dumps(plan)
        hits = hybrid_search(conn, tenant_id="acme", query="nothing", query_vector=query, k=3, model="m")
        assert hits[0].chunk_id == acme[7]


def test_the_janitor_takes_a_bounded_share_of_a_backlog_no_run_will_take(db, database):
    """A killed run's vectors, outside their graph, with no run in progress to sweep them: each janitor round (the
    intake service's, every minute) indexes up to its share of them and says how many are left; none while a run is
    in progress, nor in the round `process` runs before the runs it launches (they sweep it all)."""
    import dagster as dg

    from ingestion_pipeline.core.settings import ReliabilitySettings
    from ingestion_pipeline.defs.ledger import janitor

    add_tenant_vectors(db, "acme", np.random.default_rng(19).normal(size=(30, 384)), indexed=False)
    with dg.instance_for_test() as instance:
        assert janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=0).is_empty
        running = dg.DagsterRun(job_name="document_batch_job", run_id=str(uuid.uuid4()),
                                status=dg.DagsterRunStatus.STARTED)
        instance.add_run(running)  # a batch in progress: its promotion step will sweep
        assert janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=20).indexed == 0
        instance.delete_run(running.run_id)
        first = janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=20)
        assert (first.indexed, first.left_to_index, vector_backlog.pending(db)) == (20, 10, 10)
        assert "20 promoted vector(s) put into their HNSW graph (10 still waiting)" in first.describe()
        second = janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=20)
        assert (second.indexed, second.left_to_index) == (10, 0)
        assert janitor.run_janitor(instance, database, ReliabilitySettings()).is_empty


def test_the_sweeps_priority_is_a_setting_and_a_bad_one_is_refused_by_name(monkeypatch):
    from ingestion_pipeline.core.settings import load_settings

    monkeypatch.delenv("INGESTION_INDEX_SWEEP_NICE", raising=False)
    assert load_settings().batch.index_nice == vector_backlog.SWEEP_NICE == 10
    monkeypatch.setenv("INGESTION_INDEX_SWEEP_NICE", "0")
    assert load_settings().batch.index_nice == 0
    for bad in ("20", "-1", "low"):
        monkeypatch.setenv("INGESTION_INDEX_SWEEP_NICE", bad)
        with pytest.raises(ValueError, match=f"INGESTION_INDEX_SWEEP_NICE must be a whole number from 0 to 19, "
                                             f"got '{bad}'"):
            load_settings()
