"""Search at scale: p50/p95 latency of hybrid search and recall@10 of its vector ranking against an exact
search, for a small tenant and a large one, over 100,000 chunks in 20 tenants (synthetic vectors).

Runs in a throwaway database on the embedded server (dropped at the end). Not part of the tests.

    .venv/bin/python benchmarks/search_latency.py [--chunks 100000] [--tenants 20] [--queries 200]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
DIM = 384


def tenant_sizes(total: int, tenants: int) -> list[int]:
    """A skewed split: the largest tenant holds ~40 %, the smallest ~0.2 %."""
    weights = np.array([0.6 ** i for i in range(tenants)])
    sizes = np.maximum((weights / weights.sum() * total).astype(int), 50)
    sizes[0] += total - sizes.sum()
    return [int(s) for s in sizes]


def synthetic_vectors(n: int, centers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    topics = rng.integers(0, len(centers), size=n)
    vectors = centers[topics] + rng.normal(scale=0.35, size=(n, DIM)) / np.sqrt(DIM)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def load(conn, sizes: list[int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One document with one active version per 50 chunks; COPY everything, then build the HNSW index."""
    from psycopg import sql

    from ingestion_pipeline.documents.vector_index import ensure_vector_index, index_name

    centers = rng.normal(size=(200, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors_by_tenant: dict[str, np.ndarray] = {}
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index_name(DIM))))
    chunk_id = 0
    for t, size in enumerate(sizes):
        tenant = f"t{t:02d}"
        vectors = synthetic_vectors(size, centers, rng)
        vectors_by_tenant[tenant] = vectors
        conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s)", (tenant,))
        docs = (size + 49) // 50
        doc_rows = conn.execute(
            """INSERT INTO documents (tenant_id, source_uri, title)
               SELECT %s, 'bench://' || %s || '/' || g, 'doc ' || g FROM generate_series(1, %s) g
               RETURNING doc_id""", (tenant, tenant, docs)).fetchall()
        version_ids = []
        for d in doc_rows:
            v = conn.execute(
                """INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,
                       pipeline_fingerprint, is_active, size_bytes, chunk_count, token_count, activated_at)
                   VALUES (%s, %s, 1, 'h', 'bench', true, 1, 50, 100, now()) RETURNING version_id""",
                (tenant, d["doc_id"])).fetchone()
            version_ids.append((v["version_id"], d["doc_id"]))
        with conn.cursor().copy("COPY chunks (chunk_id, tenant_id, version_id, doc_id, ordinal, text, token_count, "
                                "content_hash) FROM STDIN") as copy:
            for i in range(size):
                version_id, doc_id = version_ids[i // 50]
                copy.write_row((chunk_id + i + 1, tenant, version_id, doc_id, i % 50, f"chunk {i} of {tenant}", 2,
                                "h"))
        buffer = io.StringIO()
        for i, vector in enumerate(vectors):
            buffer.write(f"{chunk_id + i + 1}\t{tenant}\tbench\t[{','.join(f'{x:.6f}' for x in vector)}]\n")
        with conn.cursor().copy("COPY chunk_embeddings (chunk_id, tenant_id, model, embedding) FROM STDIN") as copy:
            copy.write(buffer.getvalue())
        chunk_id += size
    conn.execute("SELECT setval('chunks_chunk_id_seq', %s)", (chunk_id,))
    started = time.perf_counter()
    conn.execute("SET maintenance_work_mem = '1GB'")
    ensure_vector_index(conn, DIM)  # the pipeline's own index of this dimension (sql/013)
    conn.execute("ANALYZE")
    print(f"HNSW index over {chunk_id:,} vectors built in {time.perf_counter() - started:.0f} s")
    return vectors_by_tenant


def measure(conn, tenant: str, vectors: np.ndarray, queries: int, rng: np.random.Generator) -> dict:
    from ingestion_pipeline.documents.search import hybrid_search

    chunk_ids = conn.execute(
        "SELECT chunk_id FROM chunks WHERE tenant_id = %s ORDER BY chunk_id", (tenant,)).fetchall()
    ids = np.array([r["chunk_id"] for r in chunk_ids])
    latencies, recalls = [], []
    for _ in range(queries):
        anchor = vectors[rng.integers(0, len(vectors))]
        query = anchor + rng.normal(scale=0.2, size=DIM) / np.sqrt(DIM)
        query = (query / np.linalg.norm(query)).astype(np.float32)
        exact = set(ids[np.argsort(-(vectors @ query))[:10]].tolist())
        started = time.perf_counter()
        # a text no chunk contains: the fused ranking is the vector ranking, so recall is measurable
        hits = hybrid_search(conn, tenant_id=tenant, query="zzqqxx", query_vector=query, k=10,
                             model="bench")
        latencies.append((time.perf_counter() - started) * 1000)
        recalls.append(len(exact & {h.chunk_id for h in hits}) / 10)
    latencies.sort()
    return {"p50_ms": statistics.median(latencies), "p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
            "recall_at_10": statistics.mean(recalls), "min_recall": min(recalls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from throwaway_database import throwaway_database

    from ingestion_pipeline.core.db import connect

    with throwaway_database("bench_search") as url:
        rng = np.random.default_rng(args.seed)
        sizes = tenant_sizes(args.chunks, args.tenants)
        with connect(url, autocommit=True) as conn:
            vectors = load(conn, sizes, rng)
            large, small = "t00", f"t{args.tenants - 1:02d}"
            print(f"{args.chunks:,} chunks in {args.tenants} tenants; large tenant {large}: {sizes[0]:,} chunks, "
                  f"small tenant {small}: {sizes[-1]:,} chunks; {args.queries} queries each")
            for tenant in (large, small):
                measure(conn, tenant, vectors[tenant], 5, rng)  # warm the caches
                m = measure(conn, tenant, vectors[tenant], args.queries, rng)
                print(f"  {tenant}: hybrid search p50 {m['p50_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms; "
                      f"vector recall@10 {m['recall_at_10']:.3f} (worst query {m['min_recall']:.1f})")
            # every size in between: where a filtered HNSW scan could return too few of the tenant's rows
            worst = min(((t, measure(conn, t, vectors[t], 30, rng)) for t in vectors),
                        key=lambda item: item[1]["recall_at_10"])
            name, m = worst
            print(f"  lowest recall@10 of all {len(vectors)} tenants (30 queries each): {name} "
                  f"({len(vectors[name]):,} chunks) {m['recall_at_10']:.3f}, p95 {m['p95_ms']:.1f} ms")

if __name__ == "__main__":
    main()
