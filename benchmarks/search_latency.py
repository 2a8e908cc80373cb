"""Search at scale: p50/p95 latency of hybrid search and recall@10 of its vector ranking against an exact
search, for the largest and the smallest tenant (and the worst of all the others), with the index build
time and size and the cost of promoting one more vector at that size.

Synthetic but shaped like the pipeline's data: clustered unit vectors (384 dimensions), chunk texts of 40
words drawn from a 20,000-word vocabulary with Zipf's frequencies, the pipeline's own HNSW index
(sql/013) and full-text index (``chunk_fts``, GIN, as promotion fills it), one active version per 50
chunks (``--chunks-per-version``), tenants whose sizes fall geometrically from the largest to the smallest,
which holds 0.1 % of the chunks. Latency is measured with two-word queries (text and vector stages both
work); recall with a text no chunk contains, so that the fused ranking is the vector ranking. Runs in a
throwaway database on the embedded server (dropped at the end). Not part of the tests.

    .venv/bin/python benchmarks/search_latency.py [--chunks 1000000] [--tenants 50] [--queries 200] [--sweep]
        [--halfvec] [--promoting 20000 [--clients 8]] [--text-arm-of REV] [--chunks-per-version 50]
        [--revisions 1]

``--sweep`` then measures every tenant under each candidate setting of the vector stage (``SWEEP``: the HNSW
scan's ef_search, order and scan budget, the exact-ranking threshold), beside the current one. ``--halfvec``
measures an HNSW index over the vectors in half precision (``halfvec``) in place of the pipeline's;
``--promoting N`` searches while another connection promotes N vectors of a new tenant (``--clients C``: C
connections searching at once, alone, while promoting as before and as now). ``--text-arm-of REV`` then searches every
tenant with the full-text arm of git revision REV and with the current one, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
DIM = 384
FTS_INDEX = "chunk_fts_words_of_tenant"  # the full-text index (sql/046), dropped for the load and built after it


def tenant_sizes(total: int, tenants: int, smallest_share: float = 0.001) -> list[int]:
    """Sizes falling geometrically, the ratio chosen so that the smallest tenant holds ``smallest_share``."""
    low, high = 0.01, 1.0
    for _ in range(60):
        ratio = (low + high) / 2
        weights = ratio ** np.arange(tenants)
        low, high = (ratio, high) if weights[-1] / weights.sum() < smallest_share else (low, ratio)
    sizes = np.maximum((weights / weights.sum() * total).astype(int), 1)
    sizes[0] += total - sizes.sum()
    return [int(s) for s in sizes]


def synthetic_vectors(n: int, centers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    topics = rng.integers(0, len(centers), size=n)
    vectors = centers[topics] + rng.normal(scale=0.35, size=(n, DIM)) / np.sqrt(DIM)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def chunk_texts(n: int, rng: np.random.Generator, words: int = 40) -> list[str]:
    """Texts of ``words`` words from a 20,000-word vocabulary with Zipf's frequencies."""
    draws = np.minimum(rng.zipf(1.2, size=(n, words)), len(VOCABULARY)) - 1
    return [" ".join(VOCABULARY[i] for i in row) for row in draws]


def _word(i: int) -> str:
    letters = "bcdfghjklmnprstvz"
    out = ""
    while True:
        out += letters[i % len(letters)] + "aeiou"[i // len(letters) % 5]
        i //= len(letters) * 5
        if not i:
            return out + "n"


VOCABULARY = [_word(i) for i in range(20_000)]


def load(conn, sizes: list[int], rng: np.random.Generator, *, halfvec: bool = False,
         model: str = "bench", per_version: int = 50, revisions: int = 1) -> dict[str, np.ndarray]:
    """One document with one active version per ``per_version`` chunks (1: a tenant of many one-chunk documents,
    tickets or FAQ entries), and ``revisions - 1`` inactive versions before it; COPY everything, then build the
    indexes (``halfvec``: the HNSW index over the vectors in half precision instead of the pipeline's own, see
    ``use_halfvec``). The vectors are stored as ``model``'s (a search through the API finds them under the
    deployment's own model)."""
    from ingestion_pipeline.documents.chunking import text_hash

    centers = rng.normal(size=(200, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors_by_tenant: dict[str, np.ndarray] = {}
    conn.execute(f"DROP INDEX IF EXISTS {FTS_INDEX}")
    chunk_id = 0
    started = time.perf_counter()
    for t, size in enumerate(sizes):
        tenant = f"t{t:02d}"
        vectors = synthetic_vectors(size, centers, rng)
        vectors_by_tenant[tenant] = vectors
        conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s)", (tenant,))
        docs = (size + per_version - 1) // per_version
        counts = [min(per_version, size - d * per_version) for d in range(docs)]
        doc_rows = conn.execute(
            """INSERT INTO documents (tenant_id, source_uri, title)
               SELECT %s, 'bench://' || %s || '/' || g, 'doc ' || g FROM generate_series(1, %s) g
               RETURNING doc_id""", (tenant, tenant, docs)).fetchall()
        doc_ids = [d["doc_id"] for d in doc_rows]
        texts = chunk_texts(size, rng)
        # the earlier versions first, inactive, each chunk's text and vector as the active one has them (what a
        # revision that changed little leaves behind: "deletion is deactivation", nothing is removed)
        for number in range(1, revisions + 1):
            version_ids = [r["version_id"] for r in conn.execute(
                """INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,
                       pipeline_fingerprint, is_active, size_bytes, chunk_count, token_count, activated_at,
                       embedding_model)
                   SELECT %s, d.doc_id, %s, 'h', 'bench', %s, 1, d.chunks, 2 * d.chunks, now(), %s
                     FROM unnest(%s::bigint[], %s::int[]) AS d(doc_id, chunks)
                   RETURNING version_id""",
                (tenant, number, number == revisions, model, doc_ids, counts)).fetchall()]
            with conn.cursor().copy("COPY chunks (chunk_id, tenant_id, version_id, doc_id, ordinal, text, "
                                    "token_count, content_hash) FROM STDIN") as copy:
                for i in range(size):
                    # each text's own hash, as promotion stores it: the reuse lookup's plan follows its statistics
                    # (one hash shared by every row made the planner expect 50,000 matches a lookup and scan every
                    # partition)
                    copy.write_row((chunk_id + i + 1, tenant, version_ids[i // per_version],
                                    doc_ids[i // per_version], i % per_version, texts[i], 40, text_hash(texts[i])))
            with conn.cursor().copy("COPY chunk_embeddings (chunk_id, tenant_id, model, embedding) FROM STDIN "
                                    "WITH (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", "text", "vector"])
                for i, vector in enumerate(vectors):
                    copy.write_row((chunk_id + i + 1, tenant, model, vector))
            chunk_id += size
        conn.execute("SELECT fold_tenant_serving_totals(%s)", (tenant,))  # one row per model, as promotion leaves it
        if t % 10 == 9:
            print(f"  loaded {t + 1} tenants, {chunk_id:,} chunks, {time.perf_counter() - started:.0f} s", flush=True)
    conn.execute("SELECT setval('chunks_chunk_id_seq', %s)", (chunk_id,))
    conn.execute("SET maintenance_work_mem = '4GB'")
    started = time.perf_counter()
    # the served versions' words only, as promotion and deactivation keep them (sql/041)
    conn.execute("""INSERT INTO chunk_fts (chunk_id, tenant_id, version_id, tsv)
                    SELECT c.chunk_id, c.tenant_id, c.version_id, setweight(to_tsvector('english', c.text), 'A')
                      FROM chunks c JOIN document_versions v ON v.version_id = c.version_id AND v.is_active""")
    for tenant in vectors_by_tenant:  # the words' counts (sql/047) one row a word, as promotion leaves them
        conn.execute("SELECT fold_tenant_serving_totals(%s)", (tenant,))
    conn.execute(f"CREATE INDEX {FTS_INDEX} ON chunk_fts USING gin "  # sql/046's, after the rows as a restore does
                 "((tsv || array_to_tsvector(ARRAY[chr(1) || tenant_id])))")
    print(f"full-text rows and GIN index over {chunk_id:,} chunks in {time.perf_counter() - started:.0f} s, "
          f"index {relation_mb(conn, FTS_INDEX):,.0f} MB", flush=True)
    started = time.perf_counter()
    build_graphs(conn, vectors_by_tenant, halfvec=halfvec)
    print(f"HNSW graphs of the {sum(len(v) > exact_max() for v in vectors_by_tenant.values())} tenants past "
          f"{exact_max():,} chunks built in {time.perf_counter() - started:.0f} s, {graphs_mb(conn):,.0f} MB",
          flush=True)
    conn.execute("VACUUM ANALYZE")
    return vectors_by_tenant


def exact_max() -> int:
    from ingestion_pipeline.documents import search

    return search.EXACT_SEARCH_MAX_CHUNKS


def build_graphs(conn, vectors_by_tenant: dict[str, np.ndarray], *, halfvec: bool = False) -> None:
    """Each tenant past the exact-ranking size its own graph, as promotion leaves them (``vector_index.py``);
    ``halfvec``: over the vectors in half precision instead (see ``use_halfvec``)."""
    from psycopg import sql

    from ingestion_pipeline.documents import vector_index

    for tenant, vectors in vectors_by_tenant.items():
        if len(vectors) <= exact_max():
            continue
        if not halfvec:
            vector_index.build_graph(conn, tenant, DIM)
            continue
        conn.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw ((embedding::halfvec({})) halfvec_cosine_ops) "
                             "WHERE tenant_id = {} AND vector_dims(embedding) = {} AND indexed").format(
            sql.Identifier(vector_index.graph_name(tenant, DIM)),
            sql.Identifier(vector_index.partition_of(conn, tenant)), DIM, sql.Literal(tenant), DIM))


def graphs_mb(conn) -> float:
    """The HNSW indexes' size, every graph of chunk_embeddings'."""
    return conn.execute("SELECT coalesce(sum(pg_relation_size(indexrelid)), 0)::float8 AS b FROM pg_stat_user_indexes "
                        "WHERE indexrelname LIKE 'chunk\\_embeddings%%hnsw%%'").fetchone()["b"] / 1e6


def use_shared_graphs(conn) -> float:
    """The layout before per-tenant graphs, for comparison in the same run: one graph per partition holding every
    tenant's vectors (sql/044's indexes), which every large tenant's search scans past its neighbours' rows. The
    tenants' own graphs are dropped; search is told a graph is ready for every tenant, and the planner takes the
    partition's. Seconds the build took."""
    from psycopg import sql

    from ingestion_pipeline.documents import search, vector_index

    for row in conn.execute("SELECT indexrelname AS name FROM pg_stat_user_indexes "
                            "WHERE indexrelname LIKE 'chunk\\_embeddings\\_hnsw\\_%%'").fetchall():
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(row["name"])))
    started = time.perf_counter()
    for partition in vector_index.partitions(conn):
        conn.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops) "
                             "WHERE vector_dims(embedding) = {} AND indexed").format(
            sql.Identifier(f"{partition}_hnsw_{DIM}"), sql.Identifier(partition), DIM, DIM))
    search.graph_ready = lambda *_: True
    conn.execute("VACUUM ANALYZE chunk_embeddings")
    return time.perf_counter() - started


def add_probe_neighbour(conn, vectors: dict[str, np.ndarray], rng: np.random.Generator,
                        count: int = 50_000) -> tuple[str, str, np.ndarray]:
    """A tenant beside the smallest one with a graph (the one whose rows are the smallest share of a shared graph),
    in its partition, ``count`` vectors around topics of its own that no other tenant writes about: what the
    neighbour probe asks about. The probed tenant, the neighbour, its vectors."""
    from hnsw_insert import stage_new_vectors, timed_inserts

    from ingestion_pipeline.documents import vector_index

    probed = min((t for t in vectors if len(vectors[t]) > exact_max()), key=lambda t: len(vectors[t]))
    partition = vector_index.partition_of(conn, probed)
    neighbour = next(f"beside{i}" for i in range(10_000) if vector_index.partition_of(conn, f"beside{i}") == partition)
    ids = stage_new_vectors(conn, count, rng, tenant=neighbour)
    timed_inserts(conn, ids, 500, tenant=neighbour)
    theirs = np.array([r["embedding"].to_numpy() for r in conn.execute(
        f'SELECT embedding FROM "pending_{neighbour}" ORDER BY chunk_id')], dtype=np.float32)
    conn.execute("VACUUM ANALYZE chunk_embeddings")
    return probed, neighbour, theirs


def neighbour_probe(conn, tenant: str, theirs: np.ndarray, queries: int, rng: np.random.Generator) -> None:
    """What the timing of a large tenant's search tells it about the tenant beside it in its partition: its
    searches on topics only the neighbour writes about, against searches on topics nobody writes about (both far
    from its own vectors), interleaved, with a text no chunk holds so that the vector stage decides. p50/p95 of
    each and the difference of the medians: what the tenant can learn of its neighbour's content."""
    from ingestion_pipeline.documents.search import hybrid_search

    nobodys = rng.normal(size=(50, DIM))
    nobodys /= np.linalg.norm(nobodys, axis=1, keepdims=True)
    timed: dict[str, list[float]] = {"theirs": [], "nobody's": []}
    for i in range(2 * queries + 10):
        kind = "theirs" if i % 2 else "nobody's"
        anchor = theirs[rng.integers(0, len(theirs))] if kind == "theirs" else nobodys[rng.integers(0, len(nobodys))]
        query = anchor + rng.normal(scale=0.2, size=DIM) / np.sqrt(DIM)
        started = time.perf_counter()
        hybrid_search(conn, tenant_id=tenant, query="zzqqxx", k=10, model="bench",
                      query_vector=(query / np.linalg.norm(query)).astype(np.float32))
        if i >= 10:  # the first ten warm the caches
            timed[kind].append((time.perf_counter() - started) * 1000)

    def line(values: list[float]) -> str:
        values = sorted(values)
        return f"p50 {statistics.median(values):.1f} / p95 {values[int(0.95 * (len(values) - 1))]:.1f} ms"

    theirs_ms, nobodys_ms = timed["theirs"], timed["nobody's"]
    gap = statistics.median(theirs_ms) - statistics.median(nobodys_ms)
    print(f"  neighbour probe, {tenant} beside {len(theirs):,} vectors of another tenant: on its neighbour's topics "
          f"{line(theirs_ms)}, on nobody's {line(nobodys_ms)}; difference of the medians {gap:+.1f} ms", flush=True)


def use_halfvec() -> None:
    """The search's index scan ordered by the half-precision distance, as a ``halfvec`` index needs (an exact
    ranking stays full precision). A candidate measured, not the pipeline's setting."""
    from ingestion_pipeline.documents import search

    search._VECTOR_ANN_SQL = search._VECTOR_ANN_SQL.replace(
        "ORDER BY {vector} <=> %(vector)s", "ORDER BY e.embedding::halfvec({dim}) <=> %(vector)s::halfvec({dim})")


def relation_mb(conn, name: str) -> float:
    """A relation's size, its partitions' included (a partitioned index is the sum of its partitions')."""
    return conn.execute("SELECT greatest(pg_relation_size(%(r)s::regclass), (SELECT sum(pg_relation_size(relid)) "
                        "FROM pg_partition_tree(%(r)s::regclass)))::float8 AS b", {"r": name}).fetchone()["b"] / 1e6


def measure(conn, tenant: str, vectors: np.ndarray, queries: int, rng: np.random.Generator) -> dict:
    from ingestion_pipeline.documents.search import hybrid_search

    chunk_ids = conn.execute(
        """SELECT c.chunk_id FROM chunks c JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
            WHERE c.tenant_id = %s ORDER BY c.chunk_id""", (tenant,)).fetchall()
    ids = np.array([r["chunk_id"] for r in chunk_ids])
    latencies, recalls = [], []
    for _ in range(queries):
        anchor = vectors[rng.integers(0, len(vectors))]
        query = anchor + rng.normal(scale=0.2, size=DIM) / np.sqrt(DIM)
        query = (query / np.linalg.norm(query)).astype(np.float32)
        exact = set(ids[np.argsort(-(vectors @ query))[:10]].tolist())
        words = " ".join(VOCABULARY[int(i)] for i in np.minimum(rng.zipf(1.2, size=2), 2000) + 20)
        started = time.perf_counter()
        hybrid_search(conn, tenant_id=tenant, query=words, query_vector=query, k=10, model="bench")
        latencies.append((time.perf_counter() - started) * 1000)
        # a text no chunk contains: the fused ranking is the vector ranking, so recall is measurable
        hits = hybrid_search(conn, tenant_id=tenant, query="zzqqxx", query_vector=query, k=10, model="bench")
        recalls.append(len(exact & {h.chunk_id for h in hits}) / 10)
    latencies.sort()
    return {"p50_ms": statistics.median(latencies), "p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
            "recall_at_10": statistics.mean(recalls), "min_recall": min(recalls), "latencies": latencies}


def insert_cost(conn, count: int, rng: np.random.Generator) -> tuple[float, float]:
    """Seconds per vector promoted into the loaded table by a new tenant with a graph of its own (as a tenant past
    the exact-ranking size has), and then without it (``hnsw_insert.py``'s promotion-shaped inserts, transactions
    of 500); the graph is dropped after."""
    from hnsw_insert import stage_new_vectors, timed_inserts
    from psycopg import sql

    from ingestion_pipeline.documents import vector_index

    ids = stage_new_vectors(conn, count, rng)
    vector_index.build_graph(conn, "new", DIM)  # empty, then grown by the inserts as promotion grows it
    with_index = statistics.median(timed_inserts(conn, ids, 500))
    conn.execute("DELETE FROM chunk_embeddings WHERE tenant_id = 'new'")
    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(vector_index.graph_name("new", DIM))))
    return with_index, statistics.median(timed_inserts(conn, ids, 500))


def under_promotion(url: str, conn, vectors: dict[str, np.ndarray], count: int, queries: int,
                    rng: np.random.Generator) -> None:
    """Searches while another connection promotes ``count`` vectors of a new tenant (transactions of 500, as
    promotion inserts a version's vectors): p50/p95 of a tenant sharing the new tenant's partition and of one in
    another partition, idle and then under the load, and the rate the promotion kept meanwhile."""
    import threading

    from hnsw_insert import stage_new_vectors, timed_inserts

    from ingestion_pipeline.core.db import connect

    tenant = "promoting"
    ids = stage_new_vectors(conn, count, rng, tenant=tenant)
    partition_of = {r["t"]: r["p"] for r in conn.execute(
        "SELECT tenant_id AS t, min(tableoid::regclass::text) AS p FROM chunk_embeddings GROUP BY tenant_id")}
    target = next((r["p"] for r in conn.execute(
        "SELECT relid::regclass::text AS p FROM pg_partition_tree('chunk_embeddings') WHERE isleaf AND "
        "satisfies_hash_partition('chunk_embeddings'::regclass, 16, "
        "  (regexp_match(relid::regclass::text, '_p(\\d+)$'))[1]::int, %s::text)", (tenant,))), None)
    beside = [t for t in vectors if partition_of.get(t) == target]
    apart = [t for t in vectors if partition_of.get(t) != target]
    chosen = {"beside it": max(beside, key=lambda t: len(vectors[t])) if beside else None,
              "elsewhere": max(apart, key=lambda t: len(vectors[t]))}
    idle = {label: measure(conn, t, vectors[t], queries, rng) for label, t in chosen.items() if t}
    rate: list[float] = []

    def promote() -> None:
        with connect(url, autocommit=True) as other:
            per_vector = timed_inserts(other, ids, 500, tenant=tenant)
        rate.append(1 / statistics.median(per_vector))

    worker = threading.Thread(target=promote)
    began = time.perf_counter()
    worker.start()
    loaded = {}
    while worker.is_alive():  # search for as long as the promotion runs
        for label, t in chosen.items():
            if t:
                loaded.setdefault(label, []).append(measure(conn, t, vectors[t], 10, rng))
    worker.join()
    print(f"\nsearch while {count:,} vectors are promoted into the partition {target} "
          f"({time.perf_counter() - began:.0f} s, {rate[0]:,.0f} vectors/s):")
    for label, t in chosen.items():
        if not t or label not in loaded:
            continue
        pooled = sorted(ms for m in loaded[label] for ms in m["latencies"])
        print(f"  {label:<10} {t} ({len(vectors[t]):,} chunks, {partition_of[t]}): "
              f"idle p50 {idle[label]['p50_ms']:.1f} / p95 {idle[label]['p95_ms']:.1f} ms; promoting p50 "
              f"{statistics.median(pooled):.1f} / p95 {pooled[int(0.95 * (len(pooled) - 1))]:.1f} ms "
              f"({len(pooled)} searches)", flush=True)
    conn.execute("DELETE FROM chunk_embeddings WHERE tenant_id = %s", (tenant,))


def clients_under_promotion(url: str, conn, vectors: dict[str, np.ndarray], count: int, clients: int,
                            seed: int, idle_seconds: float = 30.0) -> None:
    """``clients`` connections searching at once, each one search after another on a tenant drawn at random:
    first for ``idle_seconds`` alone, then while another connection promotes ``count`` vectors of a new tenant
    (transactions of 500) as promotion did before (into the HNSW graph inside each transaction), then ``count``
    more twice outside the graph, then swept into it on two connections: at the server's priority, as the sweep
    ran before, and lowered (``vector_backlog.SWEEP_NICE``), as it runs now. p50/p95 over every search, and by the
    tenant's size."""
    import threading

    from hnsw_insert import stage_new_vectors, timed_inserts

    from ingestion_pipeline.core.db import Database, connect
    from ingestion_pipeline.documents import vector_backlog
    from ingestion_pipeline.documents.search import hybrid_search

    tenant = "promoting_at_once"
    ids = stage_new_vectors(conn, count, np.random.default_rng(seed), tenant=tenant)
    names = list(vectors)

    def searches(stop: threading.Event) -> list[tuple[str, float]]:
        timed: list[tuple[str, float]] = []

        def client(i: int) -> None:
            rng = np.random.default_rng([seed, 100 + i])
            with connect(url, autocommit=True) as own:
                while not stop.is_set():
                    name = names[int(rng.integers(0, len(names)))]
                    query = vectors[name][rng.integers(0, len(vectors[name]))]
                    words = " ".join(VOCABULARY[int(w)] for w in np.minimum(rng.zipf(1.2, size=2), 2000) + 20)
                    started = time.perf_counter()
                    hybrid_search(own, tenant_id=name, query=words, query_vector=query, k=10, model="bench")
                    timed.append((name, (time.perf_counter() - started) * 1000))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        stop.wait()
        for thread in threads:
            thread.join()
        return timed

    def report(label: str, timed: list[tuple[str, float]], seconds: float) -> None:
        def line(values: list[float]) -> str:
            values = sorted(values)
            return (f"p50 {statistics.median(values):.1f} / p95 {values[int(0.95 * (len(values) - 1))]:.1f} ms "
                    f"({len(values)})") if values else "none"

        sizes = {name: len(v) for name, v in vectors.items()}
        print(f"  {label}: {len(timed) / seconds:.0f} searches/s; every search {line([ms for _, ms in timed])}; "
              f"tenants over 50,000 chunks {line([ms for n, ms in timed if sizes[n] > 50_000])}, 5,000-50,000 "
              f"{line([ms for n, ms in timed if 5_000 < sizes[n] <= 50_000])}, up to 5,000 "
              f"{line([ms for n, ms in timed if sizes[n] <= 5_000])}", flush=True)

    print(f"\n{clients} search clients at once, tenants drawn at random:")
    stop = threading.Event()
    threading.Timer(idle_seconds, stop.set).start()
    report(f"alone ({idle_seconds:.0f} s)", searches(stop), idle_seconds)
    # as promotion did before: each version's vectors into the graph inside its transaction, one connection;
    # then outside the graph, swept into it (vector_backlog.py) on two connections (the pipeline's two lanes), at
    # the server's priority and lowered. Other tenants whose vectors hash to the same partition, so each load grows
    # the same graph from about the same size (the lowered sweep last: into the largest graph).
    beside = _tenants_beside(conn, tenant, 2)
    for n, name in enumerate(beside):
        stage_new_vectors(conn, count, np.random.default_rng(seed + 1 + n), tenant=name)
    lowered = vector_backlog.SWEEP_NICE
    for label, who, sweepers, nice in (
            ("promoted into the graph, as before", tenant, 0, 0),
            ("promoted outside it, then swept on 2 connections at the server's priority", beside[0], 2, 0),
            (f"promoted outside it, then swept on 2 connections at nice {lowered}", beside[1], 2, lowered)):
        rate: list[float] = []
        stop = threading.Event()

        def promote(who: str = who, sweepers: int = sweepers, nice: int = nice, rate: list[float] = rate,
                    stop: threading.Event = stop) -> None:
            try:
                began = time.perf_counter()
                with connect(url, autocommit=True) as other:
                    timed_inserts(other, ids if who == tenant else _staged_ids(other, who), 500, tenant=who,
                                  indexed=not sweepers)
                if sweepers:
                    with Database(url, max_size=sweepers) as db:
                        vector_backlog.index_backlog(db, connections=sweepers, nice=nice)
                rate.append(count / (time.perf_counter() - began))
            finally:
                stop.set()  # the clients stop with the promotion, whether it finished or failed

        began = time.perf_counter()
        threading.Thread(target=promote).start()
        timed = searches(stop)
        seconds = time.perf_counter() - began
        if not rate:
            raise SystemExit("the promotion failed (its error is printed above)")
        report(f"while {count:,} vectors are {label} ({seconds:.0f} s, {rate[0]:,.0f} vectors/s)", timed, seconds)
    conn.execute("DELETE FROM chunk_embeddings WHERE tenant_id = ANY(%s)", ([tenant, *beside],))


def _tenants_beside(conn, tenant: str, n: int) -> list[str]:
    """``n`` tenant names whose vectors hash to ``tenant``'s partition of chunk_embeddings."""
    names = []
    for i in range(1000):
        name = f"{tenant}_{i}"
        if conn.execute("SELECT bool_or(satisfies_hash_partition('chunk_embeddings'::regclass, 16, r, %s::text) "
                        "AND satisfies_hash_partition('chunk_embeddings'::regclass, 16, r, %s::text)) AS same "
                        "FROM generate_series(0, 15) r", (tenant, name)).fetchone()["same"]:
            names.append(name)
            if len(names) == n:
                return names
    raise SystemExit(f"no {n} tenant names found beside {tenant}")


def _staged_ids(conn, tenant: str) -> list[int]:
    return [r["chunk_id"] for r in conn.execute(f'SELECT chunk_id FROM "pending_{tenant}" ORDER BY chunk_id')]


_TEXT_RANKING = "ingestion_pipeline/documents/text_ranking.py"


def _git(*args: str, check: bool = True):
    import subprocess

    return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent.parent, check=check,
                          capture_output=True, text=True)


def revision_has(revision: str, path: str) -> bool:
    """Whether ``path`` exists at git ``revision``."""
    return _git("cat-file", "-e", f"{revision}:{path}", check=False).returncode == 0


_TERM_FREQUENCIES = "ingestion_pipeline/documents/term_frequencies.py"


def text_arm_of(revision: str):
    """``text_candidates`` (the full-text arm) as ``documents/text_ranking.py`` was at git ``revision``, and the
    counts its process remembered (``term_frequencies.py``, before the counts were kept in the database; None
    after), loaded from the revision too."""
    import sys
    import types

    def loaded(path: str, name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        exec(compile(_git("show", f"{revision}:{path}").stdout, f"{revision}:{path}", "exec"), module.__dict__)
        return module

    memory = None
    if revision_has(revision, _TERM_FREQUENCIES):
        memory = loaded(_TERM_FREQUENCIES, "ingestion_pipeline.documents.term_frequencies")
        sys.modules[memory.__name__] = memory  # the revision's arm imports it by that name
    return loaded(_TEXT_RANKING, f"text_ranking_at_{revision}").text_candidates, memory


def compare_text_arms(conn, vectors: dict[str, np.ndarray], revision: str, seed: int, queries: int) -> None:
    """Every tenant searched with the full-text arm of ``revision`` and with the current one, the same queries
    in the same order, alternating: p50/p95 of the whole search for each, and whether the text arm's candidates
    came out the same (the ranking must not move when only the statements' speed should; chunks of equal scores
    may change places when a statement adds a chunk's terms up in another order). A revision whose process
    remembered the words' counts (``term_frequencies.py``) is timed twice: with nothing remembered (emptied before
    the query) and with the query's counts remembered; the current arm reads the counts the database keeps
    (sql/047) and is timed twice as well, both times into "after"."""
    from ingestion_pipeline.documents import search

    (before, memory), current = text_arm_of(revision), search.text_candidates
    if not revision_has(revision, "sql/046_chunk_fts_words_by_tenant.sql"):
        # the revision's statements ask the words alone, which only an index of the words alone serves (the one
        # before sql/046): built beside the current one for the comparison; each arm's planner takes its own
        started = time.perf_counter()
        conn.execute("CREATE INDEX bench_words_alone ON chunk_fts USING gin (tsv)")
        conn.execute("ANALYZE chunk_fts")
        print(f"  the full-text index of {revision} (the words alone) built beside it in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    differing = in_order_only = 0
    runs = (("before, nothing remembered" if memory else "before", before), ("after", current),
            ("before, remembered" if memory else "before", before), ("after", current))
    labels = list(dict.fromkeys(label for label, _ in runs))
    timed: dict[str, dict[str, list[float]]] = {t: {label: [] for label in labels} for t in vectors}
    for i, (tenant, tenant_vectors) in enumerate(vectors.items()):
        rng = np.random.default_rng([seed, i])
        for _ in range(queries):
            query = tenant_vectors[rng.integers(0, len(tenant_vectors))]
            words = " ".join(VOCABULARY[int(w)] for w in np.minimum(rng.zipf(1.2, size=2), 2000) + 20)
            was, now = before(conn, tenant, words, 50), current(conn, tenant, words, 50)
            differing += set(was) != set(now)
            in_order_only += set(was) == set(now) and was != now
            for label, arm in runs:
                if memory and "nothing" in label:
                    memory.TERM_FREQUENCIES.forget()
                search.text_candidates = arm
                try:
                    started = time.perf_counter()
                    search.hybrid_search(conn, tenant_id=tenant, query=words, query_vector=query, k=10, model="bench")
                    timed[tenant][label].append((time.perf_counter() - started) * 1000)
                finally:
                    search.text_candidates = current

    def p(values: list[float], q: float) -> float:
        values = sorted(values)
        return values[int(q * (len(values) - 1))]

    print(f"\nthe full-text arm of {revision} (before) against the current one (after), {queries} queries a tenant:")
    for label in labels:
        largest, smallest = next(iter(vectors)), list(vectors)[-1]
        worst = max(vectors, key=lambda t: p(timed[t][label], 0.95))
        print(f"  {label}: largest {largest} p50 {p(timed[largest][label], 0.5):.1f} / p95 "
              f"{p(timed[largest][label], 0.95):.1f} ms; smallest {smallest} p50 {p(timed[smallest][label], 0.5):.1f}"
              f" / p95 {p(timed[smallest][label], 0.95):.1f} ms; highest p95 {worst} "
              f"({len(vectors[worst]):,} chunks) {p(timed[worst][label], 0.95):.1f} ms", flush=True)
    print(f"  text candidates differing: {differing} of {queries * len(vectors)} queries; the same candidates in "
          f"another order: {in_order_only} (chunks of equal scores, whose sums were added in another order)")


# (label, settings of documents/search.py) measured by --sweep; the first is the code's own
SWEEP = (
    ("current", {}),
    ("ef_search 40 (80: 4 x the candidates)", {"HNSW_EF_SEARCH": 40}),
    ("ef_search 100", {"HNSW_EF_SEARCH": 100}),
    ("ef_search 200", {"HNSW_EF_SEARCH": 200}),
    ("ef_search 400", {"HNSW_EF_SEARCH": 400}),
    ("ef_search 1000", {"HNSW_EF_SEARCH": 1000}),
    ("strict order", {"HNSW_SCAN_ORDER": "strict_order"}),
    ("scan budget 100k", {"HNSW_MAX_SCAN_TUPLES": 100_000}),
    ("ef_search 1000, budget 100k", {"HNSW_EF_SEARCH": 1000, "HNSW_MAX_SCAN_TUPLES": 100_000}),
    ("exact up to 10k chunks", {"EXACT_SEARCH_MAX_CHUNKS": 10_000}),
    ("exact up to 20k chunks", {"EXACT_SEARCH_MAX_CHUNKS": 20_000}),
)


def sweep(conn, vectors: dict[str, np.ndarray], seed: int, queries: int = 30) -> None:
    """Every tenant under each setting: the lowest recall@10, the mean, the worst p95, and the mean search over
    every tenant's (what one search costs the machine: what many clients at once are bounded by). Every setting asks
    each tenant the same queries (paired), so two settings differ by what they find, not by which queries
    they drew (30 drawn queries move a tenant's recall by +-0.03)."""
    from ingestion_pipeline.documents import search

    print(f"\nvector-stage settings, every tenant ({queries} queries each):")
    print(f"  {'setting':<30} {'lowest recall':>13} {'mean recall':>11} {'under 0.95':>10} {'worst p95 ms':>12} "
          f"{'largest p95 ms':>14} {'mean ms':>7}")
    for label, changes in SWEEP:
        saved = {name: getattr(search, name) for name in changes}
        try:
            for name, value in changes.items():
                setattr(search, name, value)
            every = {t: measure(conn, t, vectors[t], queries, np.random.default_rng([seed, i]))
                     for i, t in enumerate(vectors)}
        finally:
            for name, value in saved.items():
                setattr(search, name, value)
        lowest = min(every.items(), key=lambda item: item[1]["recall_at_10"])
        print(f"  {label:<30} {lowest[1]['recall_at_10']:>8.3f} {lowest[0]:>4} "
              f"{statistics.mean(m['recall_at_10'] for m in every.values()):>11.3f} "
              f"{sum(m['recall_at_10'] < 0.95 for m in every.values()):>10} "
              f"{max(m['p95_ms'] for m in every.values()):>12.1f} {every['t00']['p95_ms']:>14.1f} "
              f"{statistics.mean(ms for m in every.values() for ms in m['latencies']):>7.1f}", flush=True)


def measure_layout(conn, vectors: dict[str, np.ndarray], chosen: tuple[str, ...], queries: int, seed: int,
                   probe: tuple[str, np.ndarray] | None = None) -> None:
    """The largest and smallest tenant's searches, every tenant's (30 queries), and the neighbour probe (the probed
    tenant and its neighbour's vectors)."""
    rng = np.random.default_rng(seed)  # each layout asked the same queries
    for tenant in chosen:
        measure(conn, tenant, vectors[tenant], 5, rng)  # warm the caches
        m = measure(conn, tenant, vectors[tenant], queries, rng)
        print(f"  {tenant}: hybrid search p50 {m['p50_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms; "
              f"vector recall@10 {m['recall_at_10']:.3f} (worst query {m['min_recall']:.1f})", flush=True)
    # every size in between: where a filtered HNSW scan could return too few of the tenant's rows
    every = {t: measure(conn, t, vectors[t], 30, rng) for t in vectors}
    for label, key in (("lowest recall@10", "recall_at_10"), ("highest p95", "p95_ms")):
        name, m = (min if key == "recall_at_10" else max)(every.items(), key=lambda item: item[1][key])
        print(f"  {label} of all {len(vectors)} tenants (30 queries each): {name} ({len(vectors[name]):,} "
              f"chunks) recall@10 {m['recall_at_10']:.3f}, p50 {m['p50_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms")
    print("  by tenant size (chunks: p95 ms, recall@10): " + ", ".join(
        f"{len(vectors[t]):,}: {m['p95_ms']:.0f}, {m['recall_at_10']:.2f}" for t, m in every.items()))
    if probe is not None:
        neighbour_probe(conn, probe[0], probe[1], 100, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--insert", type=int, default=5_000, help="vectors promoted into the loaded table")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sweep", action="store_true", help="also every tenant under each vector-stage setting")
    parser.add_argument("--sweep-queries", type=int, default=30, metavar="N", help="queries per tenant and setting")
    parser.add_argument("--promoting", type=int, default=0, metavar="N",
                        help="also search while N vectors of another tenant are promoted")
    parser.add_argument("--halfvec", action="store_true",
                        help="measure an HNSW index over half-precision vectors instead of the pipeline's")
    parser.add_argument("--clients", type=int, default=0, metavar="N",
                        help="with --promoting: N connections searching at once (alone, then while promoting)")
    parser.add_argument("--chunks-per-version", type=int, default=50, metavar="N",
                        help="chunks of each document (1: tenants of many one-chunk documents)")
    parser.add_argument("--revisions", type=int, default=1, metavar="N",
                        help="versions of each document, the last active (earlier ones keep their rows, inactive)")
    parser.add_argument("--probe-neighbour", type=int, default=50_000, metavar="N",
                        help="vectors of the tenant the neighbour probe puts beside a large one (default 50,000)")
    parser.add_argument("--shared-graphs", action="store_true",
                        help="then the same measurements with one graph per partition shared by its tenants (before)")
    parser.add_argument("--text-arm-of", metavar="REVISION",
                        help="also measure the full-text arm as it was at this git revision (before/after)")
    args = parser.parse_args()

    from hnsw_insert import encode_seconds_per_chunk
    from throwaway_database import throwaway_database

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents.search import _supports_iterative_scan

    with throwaway_database("bench_search") as url:
        rng = np.random.default_rng(args.seed)
        sizes = tenant_sizes(args.chunks, args.tenants)
        with connect(url, autocommit=True) as conn:
            version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            print(f"pgvector {version['extversion']} (iterative index scans: "
                  f"{'yes' if _supports_iterative_scan(conn) else 'no'})", flush=True)
            if args.halfvec:
                use_halfvec()
            if args.chunks_per_version < 1 or args.revisions < 1:
                parser.error("--chunks-per-version and --revisions must be at least 1")
            vectors = load(conn, sizes, rng, halfvec=args.halfvec, per_version=args.chunks_per_version,
                           revisions=args.revisions)
            large, small = "t00", f"t{args.tenants - 1:02d}"
            print(f"{args.chunks:,} active chunks in {args.tenants} tenants, {args.chunks_per_version} a document, "
                  f"{args.revisions} version(s) of each; largest "
                  f"{large}: {sizes[0]:,} chunks, smallest {small}: {sizes[-1]:,} chunks; {args.queries} queries each",
                  flush=True)
            probed, neighbour, theirs = add_probe_neighbour(conn, vectors, rng, args.probe_neighbour)
            print(f"probe: {neighbour}, {len(theirs):,} vectors on topics of its own, beside {probed}", flush=True)
            layouts = ["a graph per tenant"] + (["a graph per partition, shared (before)"] if args.shared_graphs
                                                else [])
            for layout in layouts:
                if layout != layouts[0]:
                    seconds = use_shared_graphs(conn)
                    print(f"\n{layout}: built in {seconds:.0f} s, {graphs_mb(conn):,.0f} MB", flush=True)
                else:
                    print(f"\n{layout}:", flush=True)
                measure_layout(conn, vectors, (large, small), args.queries, args.seed, (probed, theirs))
            if args.text_arm_of:
                compare_text_arms(conn, vectors, args.text_arm_of, args.seed, 60)
            if args.sweep:
                sweep(conn, vectors, args.seed, args.sweep_queries)
            if args.promoting and args.clients:
                clients_under_promotion(url, conn, vectors, args.promoting, args.clients, args.seed)
            elif args.promoting:
                under_promotion(url, conn, vectors, args.promoting, 30, rng)
            indexed, plain = insert_cost(conn, args.insert, rng)
    print(f"promoting one more vector into {args.chunks:,}: {indexed * 1000:.2f} ms with the HNSW index, "
          f"{plain * 1000:.2f} ms without; index maintenance {(indexed - plain) * 1000:.2f} ms", flush=True)
    backend, encode = encode_seconds_per_chunk(256)
    print(f"  = {(indexed - plain) / encode:.1%} of encoding an ~800-character chunk ({backend}, "
          f"{encode * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
