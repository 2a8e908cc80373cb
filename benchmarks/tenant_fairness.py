"""Another tenant's search latency while one tenant floods the API with long searches, and while an
unauthenticated client floods it with wrong passwords: the per-tenant search share and the login guard off
(their limits set out of reach) and on (the defaults), one run, one `ingestion-pipeline serve` each.

The victim searches one at a time; printed: its p50/p95 in ms idle, during a flood of ``--searches`` long
searches (1,000 characters, k=50) from the attacker's tenant ``--concurrency`` at a time, and during
``--logins`` wrong passwords sent ``--concurrency`` at a time; and what the flood got back (status counts). The
flood's client is a process of its own (``--flood-in-process``: threads beside the victim's, as figures before
2026-12-04 were taken). The index is empty (the cost measured is the query's embedding and the two ranked
queries) unless ``--chunks`` loads synthetic chunks (then both arms of a search are database work), on the
project's database server (embedded unless BENCH_DATABASE_URL says otherwise), in a throwaway database.

    .venv/bin/python benchmarks/tenant_fairness.py [--searches 300] [--logins 200] [--concurrency 32]
        [--chunks 200000] [--shares default,2] [--flood-nice 0] [--idle-searches 1000] [--no-off]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OFF = {"INGESTION_API_SEARCHES_PER_TENANT": "100000", "INGESTION_API_MAX_CONCURRENT_LOGINS": "100000",
       "INGESTION_API_LOGIN_FAILURES_PER_ADDRESS": "100000000", "INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT": "100000000"}
LONG_QUERY = " ".join(["quarterly revenue recognition policy exceptions for regional subsidiaries"] * 20)[:1000]


def _victim(url: str, headers: dict, stop: threading.Event, minimum: int, query: str) -> list[float]:
    times = []
    with httpx.Client(timeout=120) as client:
        while not stop.is_set() or len(times) < minimum:
            started = time.perf_counter()
            r = client.get(f"{url}/v1/search", params={"q": query}, headers=headers)
            if r.status_code == 200:
                times.append((time.perf_counter() - started) * 1000)
    return times


def _figures(times: list[float]) -> str:
    return f"p50 {statistics.median(times):7.0f}  p95 {_p95(times):7.0f}  (n={len(times)})"


def _p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[int(0.95 * (len(ordered) - 1))]


def _ratio(during: list[float], idle: list[float]) -> str:
    return f"p95 {_p95(during) / _p95(idle):.1f}x idle"


def _during(url: str, victim: dict, flood, query: str) -> tuple[list[float], Counter]:
    stop = threading.Event()
    with ThreadPoolExecutor(1) as reader:
        measured = reader.submit(_victim, url, victim, stop, 10, query)
        codes = flood()
        stop.set()
        return measured.result(), codes


def _search_flood(url: str, attacker: tuple[dict, str], count: int, concurrency: int) -> Counter:
    headers, query = attacker

    def one(_):
        return httpx.get(f"{url}/v1/search", params={"q": query, "k": 50}, headers=headers,
                         timeout=300).status_code
    with ThreadPoolExecutor(concurrency) as pool:
        return Counter(pool.map(one, range(count)))


def _login_flood(url: str, _headers: None, count: int, concurrency: int) -> Counter:
    def one(n):
        return httpx.post(f"{url}/v1/auth/token", timeout=300,
                          json={"email": f"nobody{n % 7}@acme.example", "password": f"guess-{n}"}).status_code
    with ThreadPoolExecutor(concurrency) as pool:
        return Counter(pool.map(one, range(count)))


def _lower_client(nice: int) -> None:
    """Give the flood's client ``nice`` in a session of its own. Where the kernel groups tasks by session
    (autogroup scheduling, /proc/sys/kernel/sched_autogroup_enabled), a nice value weighs only against the
    tasks of its own session, and the groups share the cores evenly: a nice client in the benchmark's session
    would still take a group's share from the server's database (whose server runs in a session of its own).
    The group's own nice (/proc/self/autogroup) is what lowers it against them."""
    if not nice:
        return
    os.setsid()
    with contextlib.suppress(OSError):  # no autogroup scheduling: the task's nice is the whole story
        Path("/proc/self/autogroup").write_text(str(nice))
    os.nice(nice)


def _flood(args, flood, url: str, headers: dict | None) -> Counter:
    """The flood's client: its own process (an attacker's threads do not share the victim's interpreter, whose
    timings 32 flooding threads in it would stretch), or, with ``--flood-in-process``, threads beside the
    victim's as the earlier figures were measured."""
    count = args.searches if flood is _search_flood else args.logins
    if args.flood_in_process:
        return flood(url, headers, count, args.concurrency)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_lower_client,
                             initargs=(args.flood_nice,)) as attacker:
        return attacker.submit(flood, url, headers, count, args.concurrency).result()


def measure(label: str, database_url: str, args, extra_env: dict, tenants: tuple[str, str],
            queries: tuple[str, str]) -> None:
    from ingestion_pipeline_tests.api.conftest import start_server, user_token

    with tempfile.TemporaryDirectory() as tmp, start_server(database_url, Path(tmp), **extra_env) as server:
        attacker = {"Authorization": f"Bearer {user_token(database_url, tenants[0], f'flood-{label}@a.example')}"}
        victim = {"Authorization": f"Bearer {user_token(database_url, tenants[1], f'reader-{label}@v.example')}"}
        stop = threading.Event()
        stop.set()
        _victim(server.url, victim, stop, 10, queries[1])  # warm: the first searches pay one-time costs
        idle = _victim(server.url, victim, stop, args.idle_searches, queries[1])

        def searches() -> Counter:
            return _flood(args, _search_flood, server.url, (attacker, queries[0]))

        def logins() -> Counter:
            return _flood(args, _login_flood, server.url, None)

        during_search, search_codes = _during(server.url, victim, searches, queries[1])
        during_login, login_codes = _during(server.url, victim, logins, queries[1])
        print(f"{label:10} idle            {_figures(idle)}", flush=True)
        print(f"{label:10} search flood    {_figures(during_search)}  {_ratio(during_search, idle)}   "
              f"flood got {dict(search_codes)}", flush=True)
        print(f"{label:10} login flood     {_figures(during_login)}  {_ratio(during_login, idle)}   "
              f"flood got {dict(login_codes)}", flush=True)


def _load(url: str, chunks: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """The attacker's tenant with ``chunks`` synthetic chunks and the victim's with a tenth of that
    (``search_latency.load``: Zipf-distributed words, clustered vectors stored under the deployment's model);
    the attacker's query is 1,000 characters of the commonest words, so both arms of its search are work."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.rows import dict_row
    from search_latency import VOCABULARY, load

    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.services import Services

    model = Services(load_settings()).embedder.file_info.name
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        register_vector(conn)
        load(conn, [chunks, max(chunks // 10, 100)], np.random.default_rng(7), model=model)
    attacker_query = " ".join(VOCABULARY[:200])[:1000]
    return ("t00", "t01"), (attacker_query, f"{VOCABULARY[12]} {VOCABULARY[300]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--idle-searches", type=int, default=1000, help="the victim's searches before any flood "
                        "(after 10 to warm up)")
    parser.add_argument("--shares", default="default", help="comma-separated INGESTION_API_SEARCHES_PER_TENANT "
                        "values to measure with the limits on ('default': the setting's default, half the cores)")
    parser.add_argument("--flood-in-process", action="store_true", help="the flood's client threads in the "
                        "victim's process (how figures before 2026-12-04 were measured)")
    parser.add_argument("--flood-nice", type=int, default=0, help="the flood client's nice value (it stands in "
                        "for a remote client; on these 2 cores its own CPU is taken from the server)")
    parser.add_argument("--chunks", type=int, default=0, help="index this many synthetic chunks for the "
                        "attacker's tenant (a tenth for the victim's) so that searches cost the database work; "
                        "0: an empty index")
    parser.add_argument("--no-off", action="store_true", help="skip the run with the limits off")
    args = parser.parse_args()
    from throwaway_database import throwaway_database

    print("another tenant's search latency, ms (one search at a time)")
    with throwaway_database("bench_fairness") as url:
        tenants, queries = ("acme", "globex"), (LONG_QUERY, "travel expense policy")
        if args.chunks:
            tenants, queries = _load(url, args.chunks)
        if not args.no_off:
            measure("off", url, args, OFF, tenants, queries)
        for share in args.shares.split(","):
            measure(f"on/{share}"[:10], url, args,
                    {} if share == "default" else {"INGESTION_API_SEARCHES_PER_TENANT": share}, tenants, queries)


if __name__ == "__main__":
    main()
