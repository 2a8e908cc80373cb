"""What a search costs depends on its own tenant's content only. In an HNSW graph shared by the tenants of a
partition, a large tenant's query in a co-partitioned tenant's vocabulary walked the neighbour's vectors, dropped by
the tenant filter one by one, and came back ~10 ms slower: the tenant learnt what its neighbour holds. A large
tenant now has a graph of its own (``documents/vector_index.py``); a small one is ranked exactly over its own rows.

Time is not measured (these machines are noisy): the work is. Each search's vector statement is explained, with
buffers, inside the search's own transaction and settings, and the blocks its scan of chunk_embeddings reads are
compared before and after a neighbour fills the same partition with vectors nearer the query than any of the
tenant's."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest
from psycopg import sql

from ingestion_pipeline.documents import search, vector_index
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline_tests.documents.test_search import tenant_beside
from ingestion_pipeline_tests.helpers import add_tenant_vectors

pytestmark = pytest.mark.integration


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def _searched(db, monkeypatch, tenant: str, query: np.ndarray) -> tuple[list[int], list[dict]]:
    """The search's hits, and the plan of each vector statement it ran, as it ran them (explained with buffers in
    its own transaction, after its own settings)."""
    plans: list[dict] = []
    execute = psycopg.Connection.execute

    def explaining(self, statement, params=None, **kwargs):
        text = statement.as_string(self) if isinstance(statement, sql.Composable) else str(statement)
        if "FROM chunk_embeddings e" in text and "ORDER BY" in text and "EXPLAIN" not in text:
            [[plan]] = execute(self, sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + sql.SQL(text),
                               params).fetchone().values()
            plans.append(plan["Plan"])
        return execute(self, statement, params, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Connection, "execute", explaining)
        hits = hybrid_search(db, tenant_id=tenant, query="nothing matches this", query_vector=query, k=5, model="m")
    return [h.chunk_id for h in hits], plans


def _embedding_scans(plan: dict) -> list[dict]:
    """The plan's nodes that read chunk_embeddings (a partition of it), with their buffers."""
    found = [plan] if plan.get("Relation Name", "").startswith("chunk_embeddings") else []
    for child in plan.get("Plans", []):
        found += _embedding_scans(child)
    return found


def _blocks(plans: list[dict]) -> int:
    return sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for p in plans for n in _embedding_scans(p))


def _settle(db, monkeypatch, query: np.ndarray) -> None:
    """The partition as a quiet database has it: vacuumed, its statistics current, its B-tree rebuilt (an update's
    page splits otherwise move where the tenant's keys lie by a page, which is the update's doing, not what its
    vectors say), and one search run (the first in a session reads a few catalog blocks of the graph once)."""
    db.execute("VACUUM ANALYZE chunk_embeddings")
    db.execute(sql.SQL("REINDEX INDEX {}").format(sql.Identifier(vector_index.partition_of(db, "big") + "_pkey")))
    _searched(db, monkeypatch, "big", query)


@pytest.mark.parametrize("size", ["large", "small"])
def test_a_neighbours_vectors_moving_near_the_query_change_nothing_a_search_reads(db, database, monkeypatch, size):
    """The same neighbour, with as many rows before and after (the partition's statistics alike): only where its
    vectors lie changes, from far from the query to all around it."""
    rng = np.random.default_rng(21)
    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", 300)
    centre, far = _unit(rng.normal(size=(2, 384)))
    # the tenant's own vectors, nowhere near the query; the query in what will be the neighbour's vocabulary
    own = add_tenant_vectors(db, "big", -centre + rng.normal(scale=0.05, size=(400 if size == "large" else 200, 384)))
    neighbour = tenant_beside(db, "big")
    theirs = add_tenant_vectors(db, neighbour, far + rng.normal(scale=0.02, size=(3000, 384)))
    query = _unit(centre + rng.normal(scale=0.02, size=384))
    db.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) "
               "VALUES ('m', %s, 384, '/models/m')", ("0" * 64,))
    db.execute("UPDATE document_versions SET embedding_model = 'm'")  # as promotion sets it
    ensured = vector_index.ensure_graphs(database, search.EXACT_SEARCH_MAX_CHUNKS, ["big"])
    assert ensured.built == ([("big", 384)] if size == "large" else []) and not ensured.failed
    assert vector_index.graph_ready(db, "big", 384) is (size == "large")
    _settle(db, monkeypatch, query)
    before, plans_before = _searched(db, monkeypatch, "big", query)

    near = _unit(centre + rng.normal(scale=0.02, size=(len(theirs), 384)))
    with db.cursor() as cur:
        cur.executemany("UPDATE chunk_embeddings SET embedding = %s WHERE tenant_id = %s AND chunk_id = %s",
                        [(vector, neighbour, chunk_id) for vector, chunk_id in zip(near, theirs, strict=True)])
    _settle(db, monkeypatch, query)
    after, plans_after = _searched(db, monkeypatch, "big", query)

    assert before == after and set(after) <= set(own)
    scans = [n for p in plans_after for n in _embedding_scans(p)]
    assert scans, "the search ran no statement over chunk_embeddings"
    if size == "large":  # through the tenant's own graph, in its partition
        assert vector_index.graph_name("big", 384) in json.dumps(plans_after)
    read_before, read_after = _blocks(plans_before), _blocks(plans_after)
    assert read_after == read_before, (
        f"the search read {read_before} blocks of vectors with the neighbour's far from the query and {read_after} "
        "with them around it")


def test_a_small_tenants_exact_ranking_reads_its_own_rows_however_much_its_neighbour_stores(db, database,
                                                                                          monkeypatch):
    """A tenant ranked exactly reads its rows through its key, not the partition: read whole, its neighbours'
    rows would make its searches slower the more they store."""
    rng = np.random.default_rng(22)
    own = add_tenant_vectors(db, "big", rng.normal(size=(300, 384)))
    query = _unit(rng.normal(size=384))
    _settle(db, monkeypatch, query)
    before, plans_before = _searched(db, monkeypatch, "big", query)
    add_tenant_vectors(db, tenant_beside(db, "big"), rng.normal(size=(3000, 384)))
    _settle(db, monkeypatch, query)
    after, plans_after = _searched(db, monkeypatch, "big", query)
    assert before == after and set(after) <= set(own)
    assert [n["Node Type"] for p in plans_after for n in _embedding_scans(p)] and not [
        n for p in plans_before + plans_after for n in _embedding_scans(p) if n["Node Type"] == "Seq Scan"]
    assert _blocks(plans_after) == _blocks(plans_before)
