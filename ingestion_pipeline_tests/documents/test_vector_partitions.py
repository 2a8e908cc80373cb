"""The vectors are partitioned by tenant (sql/038), and a large tenant's HNSW graph is its own (sql/052), in its
partition; a database of the unpartitioned table upgrades with every vector. (A search reading its tenant's
partition only: ``test_search.py``.)"""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.migrations import apply_migrations
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.documents.vector_index import build_graph, graph_name, graph_ready, partition_of, partitions
from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before


def _kind(conn: psycopg.Connection) -> str:
    """chunk_embeddings' relkind: 'r' a plain table, 'p' a partitioned one."""
    return conn.execute("SELECT relkind FROM pg_class WHERE relname = 'chunk_embeddings'").fetchone()["relkind"]


def test_a_tenants_graph_holds_its_own_rows_in_its_partition_and_is_built_once(db):
    rng = np.random.default_rng(4)
    add_tenant_vectors(db, "acme", rng.normal(size=(40, 12)))
    add_tenant_vectors(db, "globex", rng.normal(size=(10, 12)))
    assert not graph_ready(db, "acme", 12)
    assert build_graph(db, "acme", 12) is True
    assert build_graph(db, "acme", 12) is False  # valid already
    assert graph_ready(db, "acme", 12) and not graph_ready(db, "globex", 12) and not graph_ready(db, "acme", 384)
    [row] = db.execute("SELECT tablename, indexdef FROM pg_indexes WHERE indexname = %s",
                       (graph_name("acme", 12),)).fetchall()
    assert row["tablename"] == partition_of(db, "acme") and row["tablename"] in partitions(db)
    assert "tenant_id = 'acme'::text" in row["indexdef"] and "indexed" in row["indexdef"]
    assert len(graph_name("x" * 10_000, 384)) <= 63 and graph_name("a", 384) != graph_name("b", 384)


def test_a_graph_left_invalid_by_a_failed_build_is_built_again(db):
    add_tenant_vectors(db, "acme", np.random.default_rng(6).normal(size=(20, 12)))
    assert build_graph(db, "acme", 12)
    # what a build killed half-way leaves: the index, marked invalid
    db.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (graph_name("acme", 12),))
    assert not graph_ready(db, "acme", 12)
    assert build_graph(db, "acme", 12) is True
    assert graph_ready(db, "acme", 12)


def test_an_unpartitioned_table_upgrades_with_every_vector_and_each_dimensions_index(pg_server_url, tmp_path):
    url = database_migrated_before(pg_server_url, tmp_path, "038")
    rng = np.random.default_rng(5)
    with connect(url, autocommit=True) as conn:
        assert _kind(conn) == "r"
        acme = add_tenant_vectors(conn, "acme", rng.normal(size=(30, 384)))
        globex = add_tenant_vectors(conn, "globex", rng.normal(size=(20, 384)))
        conn.execute("CREATE INDEX chunk_embeddings_hnsw_8 ON chunk_embeddings "
                     "USING hnsw ((embedding::vector(8)) vector_cosine_ops) WHERE vector_dims(embedding) = 8")
        small = add_tenant_vectors(conn, "tiny", rng.normal(size=(4, 8)))  # another model's dimension
        stored = {r["chunk_id"]: r["embedding"] for r in conn.execute("SELECT chunk_id, embedding::text FROM "
                                                                       "chunk_embeddings")}
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        assert _kind(conn) == "p"
        moved = {r["chunk_id"]: r["embedding"] for r in conn.execute("SELECT chunk_id, embedding::text FROM "
                                                                      "chunk_embeddings")}
        assert moved == stored and set(moved) == set(acme + globex + small)
        for tenant in ("acme", "globex", "tiny"):  # each tenant's rows in one partition, the one its hash names
            assert conn.execute("SELECT count(DISTINCT tableoid) AS n FROM chunk_embeddings WHERE tenant_id = %s",
                                (tenant,)).fetchone()["n"] == 1
        # the graphs shared by a partition's tenants are gone (sql/052), their names kept by empty indexes that
        # nothing uses; tenants this small are ranked exactly
        assert _index_names(conn) == {"chunk_embeddings_hnsw_384": False, "chunk_embeddings_hnsw_8": False}
        assert conn.execute("SELECT to_regclass('chunk_embeddings_unpartitioned') AS t").fetchone()["t"] is None
        hits = hybrid_search(conn, tenant_id="globex", query="nothing", k=3, model="m",
                             query_vector=np.asarray(json.loads(stored[globex[0]]), dtype=np.float32))
        assert hits[0].chunk_id == globex[0]


def _register_model_m(conn) -> None:
    conn.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) "
                 "VALUES ('m', %s, 384, '/models/m')", ("0" * 64,))
    conn.execute("UPDATE document_versions SET embedding_model = 'm'")  # as promotion sets it


def _index_names(conn) -> dict[str, bool]:
    return {r["name"]: r["valid"] for r in conn.execute(
        "SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname LIKE 'chunk\\_embeddings%%hnsw%%'")}


@pytest.mark.integration  # two databases migrated and a 5,001-vector graph built: ~20 s, the fast tier's longest
def test_a_database_of_shared_graphs_upgrades_to_a_graph_per_large_tenant(pg_server_url, tmp_path, monkeypatch,
                                                                         capsys):
    from ingestion_pipeline.cli import main

    url = database_migrated_before(pg_server_url, tmp_path, "052")
    rng = np.random.default_rng(8)
    with connect(url, autocommit=True) as conn:
        big = add_tenant_vectors(conn, "big", rng.normal(size=(5_001, 384)))
        add_tenant_vectors(conn, "small", rng.normal(size=(20, 384)))
        _register_model_m(conn)
        assert _index_names(conn)["chunk_embeddings_hnsw_384"]  # the shared graph, valid
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        # the shared graph is gone; its name stays on an empty index that nothing uses, so a worker of the release
        # before does not build it again during the rollout
        assert _index_names(conn) == {"chunk_embeddings_hnsw_384": False}
        stored = np.asarray(json.loads(conn.execute("SELECT embedding::text AS e FROM chunk_embeddings "
                                                    "WHERE chunk_id = %s", (big[9],)).fetchone()["e"]), np.float32)
        # until its graph is built the large tenant is ranked exactly
        assert hybrid_search(conn, tenant_id="big", query="nothing", query_vector=stored, k=3, model="m"
                             )[0].chunk_id == big[9]
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "migrate", "--json"]) == 0
    [report] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert report["applied"] == [] and report["graphs_built"] == [["big", 384]] and report["graphs_failed"] == []
    with connect(url, autocommit=True) as conn:
        assert graph_ready(conn, "big", 384) and not graph_ready(conn, "small", 384)
        assert _index_names(conn) == {"chunk_embeddings_hnsw_384": False, graph_name("big", 384): True}
        hits = hybrid_search(conn, tenant_id="big", query="nothing", query_vector=stored, k=3, model="m")
        assert hits[0].chunk_id == big[9]


def test_the_janitor_builds_a_large_tenants_missing_graph(database, db, monkeypatch):
    import dagster as dg

    from ingestion_pipeline.core.settings import ReliabilitySettings
    from ingestion_pipeline.defs.ledger import janitor
    from ingestion_pipeline.documents import search

    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", 30)
    add_tenant_vectors(db, "acme", np.random.default_rng(9).normal(size=(40, 384)))
    add_tenant_vectors(db, "globex", np.random.default_rng(10).normal(size=(10, 384)))
    _register_model_m(db)
    with dg.instance_for_test() as instance:
        report = janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=0)
        assert report.graphs_built == [("acme", 384)] and "HNSW graph built: acme (384)" in report.describe()
        assert janitor.run_janitor(instance, database, ReliabilitySettings(), backlog_per_round=0).is_empty
    assert graph_ready(db, "acme", 384) and not graph_ready(db, "globex", 384)
