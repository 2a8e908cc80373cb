"""The vectors are partitioned by tenant (sql/038): a new dimension's index is one per partition, and a database of
the unpartitioned table upgrades with every vector and every dimension's index. (A search reading its tenant's
partition only: ``test_search.py``.)"""

from __future__ import annotations

import json

import numpy as np
import psycopg

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.migrations import apply_migrations
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.documents.vector_index import ensure_vector_index, partitions
from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before


def _kind(conn: psycopg.Connection) -> str:
    """chunk_embeddings' relkind: 'r' a plain table, 'p' a partitioned one."""
    return conn.execute("SELECT relkind FROM pg_class WHERE relname = 'chunk_embeddings'").fetchone()["relkind"]


def test_a_new_dimensions_index_is_one_per_partition_named_by_it(db):
    assert ensure_vector_index(db, 12) is True
    assert ensure_vector_index(db, 12) is False
    children = {r["name"] for r in db.execute(
        "SELECT relid::regclass::text AS name FROM pg_partition_tree('chunk_embeddings_hnsw_12') WHERE isleaf")}
    assert len(partitions(db)) == 16
    assert children == {f"{p}_hnsw_12" for p in partitions(db)}
    db.execute("DROP INDEX chunk_embeddings_hnsw_12")  # the parent's drop takes its partitions' along
    assert db.execute("SELECT count(*) AS n FROM pg_indexes WHERE indexname LIKE '%%_hnsw_12'").fetchone()["n"] == 0


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
        names = {r["indexname"] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE "
                                                      "'chunk_embeddings_%%hnsw_%%'")}
        assert names == {"chunk_embeddings_hnsw_384", "chunk_embeddings_hnsw_8"} | {
            f"{p}_hnsw_{d}" for p in partitions(conn) for d in (384, 8)}
        assert conn.execute("SELECT to_regclass('chunk_embeddings_unpartitioned') AS t").fetchone()["t"] is None
        hits = hybrid_search(conn, tenant_id="globex", query="nothing", k=3, model="m",
                             query_vector=np.asarray(json.loads(stored[globex[0]]), dtype=np.float32))
        assert hits[0].chunk_id == globex[0]
