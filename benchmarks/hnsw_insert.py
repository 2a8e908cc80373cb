"""What HNSW index maintenance costs when the pipeline promotes vectors, against what encoding them costs.

Promotion inserts a version's vectors into ``chunk_embeddings``, whose per-dimension HNSW index (sql/013)
is maintained row by row. This loads ``--existing`` vectors (synthetic, clustered, as search_latency.py
does) with the index built once, then inserts ``--insert`` more in transactions of ``--batch`` (as
promotion does, ``INSERT … SELECT`` from the staged vectors), with the index and then without it, and
encodes real text with the pipeline's embedder in the same run: if maintenance were a large share of a
big initial load, it would be worth batching (the issue's lever); the figures say whether it is.

    .venv/bin/python benchmarks/hnsw_insert.py [--existing 100000] [--insert 5000] [--batch 500] [--connections 2]

Then the same vectors as promotion inserts them now (outside the graph, sql/044): that insert, the new tenant's
vector stage while none of its vectors is in the graph (ranked exactly beside the index) and once all are, and
the backlog's sweep into the graph on ``--connections`` connections (``vector_backlog.py``).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_latency import DIM, load, synthetic_vectors, tenant_sizes  # noqa: E402
from throwaway_database import throwaway_database  # noqa: E402

# the sample corpus: INGESTION_CORPUS_DIR as the tests read it, else beside the checkout
CORPUS = Path(os.environ.get("INGESTION_CORPUS_DIR") or Path(__file__).resolve().parents[2] / "shared" / "corpus"
              ) / "documents"


def stage_new_vectors(conn, count: int, rng: np.random.Generator, tenant: str = "new") -> list[int]:
    """A tenant with ``count`` chunk rows and their vectors in a table of its own (``pending_<tenant>``), not yet
    promoted."""
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s)", (tenant,))
    doc = conn.execute("INSERT INTO documents (tenant_id, source_uri, title) VALUES (%s, 'bench://' || %s, 'new') "
                       "RETURNING doc_id", (tenant, tenant)).fetchone()["doc_id"]
    version = conn.execute(
        """INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash, pipeline_fingerprint,
               is_active, size_bytes, chunk_count, token_count, activated_at)
           VALUES (%s, %s, 1, 'h', 'bench', true, 1, %s, %s, now()) RETURNING version_id""",
        (tenant, doc, count, count)).fetchone()["version_id"]
    ids = [r["chunk_id"] for r in conn.execute(
        """INSERT INTO chunks (tenant_id, version_id, doc_id, ordinal, text, token_count, content_hash)
           SELECT %s, %s, %s, g, 'new chunk ' || g, 2, encode(sha256(convert_to('new chunk ' || g, 'UTF8')), 'hex')
             FROM generate_series(1, %s) g RETURNING chunk_id""",
        (tenant, version, doc, count)).fetchall()]
    centers = rng.normal(size=(200, DIM))
    vectors = synthetic_vectors(count, centers / np.linalg.norm(centers, axis=1, keepdims=True), rng)
    conn.execute(f'CREATE TABLE "pending_{tenant}" (chunk_id bigint PRIMARY KEY, embedding vector(384))')
    buffer = io.StringIO()
    for chunk_id, vector in zip(ids, vectors, strict=True):
        buffer.write(f"{chunk_id}\t[{','.join(f'{x:.6f}' for x in vector)}]\n")
    with conn.cursor().copy(f'COPY "pending_{tenant}" (chunk_id, embedding) FROM STDIN') as copy:
        copy.write(buffer.getvalue())
    return ids


def timed_inserts(conn, ids: list[int], batch: int, tenant: str = "new", *, indexed: bool = True) -> list[float]:
    """Seconds per vector of each transaction of ``batch`` inserts (promotion's statement: one version's vectors
    from staging). ``indexed=False``: as promotion inserts them now, outside the HNSW graph (sql/044)."""
    per_vector = []
    for start in range(0, len(ids), batch):
        part = ids[start:start + batch]
        began = time.perf_counter()
        with conn.transaction():
            conn.execute(f"""INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, embedding, indexed)
                             SELECT chunk_id, %s, 'bench', embedding, %s FROM "pending_{tenant}"
                              WHERE chunk_id BETWEEN %s AND %s""", (tenant, indexed, part[0], part[-1]))
        per_vector.append((time.perf_counter() - began) / len(part))
    return per_vector


def promoted_then_indexed(url: str, conn, ids: list[int], batch: int, connections: int,
                          rng: np.random.Generator, queries: int = 60) -> dict:
    """The vectors inserted as promotion does now (``indexed = false``), the new tenant's vector stage timed while
    none is in the graph, the backlog swept (``vector_backlog.index_backlog``), the stage timed again."""
    from ingestion_pipeline.core.db import Database
    from ingestion_pipeline.documents import search, vector_backlog

    promoted = statistics.median(timed_inserts(conn, ids, batch, indexed=False))
    conn.execute("ANALYZE chunk_embeddings")
    stored = np.array([r["embedding"].to_numpy() for r in conn.execute(
        "SELECT embedding FROM chunk_embeddings WHERE tenant_id = 'new' ORDER BY random() LIMIT %s", (queries,))])
    asked = [(v + rng.normal(scale=0.05, size=DIM)).astype(np.float32) for v in stored]

    def stage_ms() -> tuple[float, float]:
        times = []
        for vector in asked:
            began = time.perf_counter()
            with conn.transaction():
                search._vector_candidates(conn, "new", vector / np.linalg.norm(vector), "bench", 10, 10, exact=False)
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times), float(np.percentile(times, 95))

    before = stage_ms()
    with Database(url, max_size=connections) as db:
        began = time.perf_counter()
        swept = vector_backlog.index_backlog(db, connections=connections)
        sweep = (time.perf_counter() - began) / max(swept, 1)
    return {"promote_s": promoted, "sweep_s": sweep, "before": before, "after": stage_ms()}


def encode_seconds_per_chunk(texts: int) -> tuple[str, float]:
    """The pipeline's embedder (its default backend) on ~800-character passages of a real book."""
    from ingestion_pipeline.documents.embedding import build_embedder

    book = (CORPUS / "book-war-and-peace-1225p.txt").read_text(encoding="utf-8", errors="replace")
    passages = [book[i:i + 800] for i in range(0, texts * 800, 800)]
    embedder = build_embedder()
    embedder.embed(passages[:16])
    began = time.perf_counter()
    embedder.embed(passages)
    return embedder.backend_in_use or "?", (time.perf_counter() - began) / len(passages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=100_000)
    parser.add_argument("--insert", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--encode", type=int, default=256, help="passages to encode for the comparison")
    parser.add_argument("--connections", type=int, default=2, help="connections sweeping the backlog (default 2)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents import vector_index

    rng = np.random.default_rng(args.seed)
    with throwaway_database("bench_hnsw") as url, connect(url, autocommit=True) as conn:
        load(conn, tenant_sizes(args.existing, 20), rng)
        ids = stage_new_vectors(conn, args.insert, rng)
        vector_index.build_graph(conn, "new", DIM)  # its own graph, as a tenant past the exact-ranking size has
        with_index = timed_inserts(conn, ids, args.batch)
        conn.execute("DELETE FROM chunk_embeddings WHERE tenant_id = 'new'")
        conn.execute("VACUUM ANALYZE chunk_embeddings")
        backlog = promoted_then_indexed(url, conn, ids, args.batch, args.connections, rng)
        conn.execute("DELETE FROM chunk_embeddings WHERE tenant_id = 'new'")
        conn.execute(f'DROP INDEX "{vector_index.graph_name("new", DIM)}"')
        without_index = timed_inserts(conn, ids, args.batch)
    backend, encode = encode_seconds_per_chunk(args.encode)
    indexed, plain = statistics.median(with_index), statistics.median(without_index)
    print(f"\ninserting {args.insert:,} vectors in transactions of {args.batch} into a table of "
          f"{args.existing:,} (median per vector):")
    print(f"  with the HNSW index      {indexed * 1000:7.2f} ms   ({1 / indexed:8,.0f} vectors/s)")
    print(f"  without it               {plain * 1000:7.2f} ms   ({1 / plain:8,.0f} vectors/s)")
    print(f"  index maintenance        {(indexed - plain) * 1000:7.2f} ms per vector")
    print("\nas promotion does it now: outside the graph, then the backlog swept into it (vector_backlog.py):")
    print(f"  promotion's insert       {backlog['promote_s'] * 1000:7.2f} ms per vector")
    print(f"  the sweep, {args.connections} connection(s) {backlog['sweep_s'] * 1000:7.2f} ms per vector (wall)")
    print(f"  the new tenant's vector stage (10 candidates, {args.insert:,} chunks): p50 / p95 "
          f"{backlog['before'][0]:.1f} / {backlog['before'][1]:.1f} ms while none is in the graph, "
          f"{backlog['after'][0]:.1f} / {backlog['after'][1]:.1f} ms once all are")
    print(f"  encoding one ~800-character chunk ({backend}): {encode * 1000:.1f} ms, so index maintenance is "
          f"{(indexed - plain) / encode:.1%} of the model's time per chunk")


if __name__ == "__main__":
    main()
