"""Another tenant's search latency while one tenant floods the API with long searches, and while an
unauthenticated client floods it with wrong passwords: the per-tenant search share and the login guard off
(their limits set out of reach) and on (the defaults), one run, one `ingestion-pipeline serve` each.

The victim (tenant globex) searches one at a time; printed: its p50/p95 in ms idle, during a flood of
``--searches`` long searches (1,000 characters, k=50) from tenant acme ``--concurrency`` at a time, and during
``--logins`` wrong passwords sent ``--concurrency`` at a time; and what the flood got back (status counts).
The index is empty (the cost measured is the query's embedding and the two ranked queries), on the
project's database server (embedded unless BENCH_DATABASE_URL says otherwise), in a throwaway database.

    .venv/bin/python benchmarks/tenant_fairness.py [--searches 300] [--logins 200] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OFF = {"INGESTION_API_SEARCHES_PER_TENANT": "100000", "INGESTION_API_MAX_CONCURRENT_LOGINS": "100000",
       "INGESTION_API_LOGIN_FAILURES_PER_ADDRESS": "100000000", "INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT": "100000000"}
LONG_QUERY = " ".join(["quarterly revenue recognition policy exceptions for regional subsidiaries"] * 20)[:1000]


def _victim(url: str, headers: dict, stop: threading.Event, minimum: int) -> list[float]:
    times = []
    with httpx.Client(timeout=120) as client:
        while not stop.is_set() or len(times) < minimum:
            started = time.perf_counter()
            r = client.get(f"{url}/v1/search", params={"q": "travel expense policy"}, headers=headers)
            if r.status_code == 200:
                times.append((time.perf_counter() - started) * 1000)
    return times


def _figures(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return f"p50 {statistics.median(ordered):7.0f}  p95 {p95:7.0f}  (n={len(times)})"


def _during(url: str, victim: dict, flood) -> tuple[list[float], Counter]:
    stop = threading.Event()
    with ThreadPoolExecutor(1) as reader:
        measured = reader.submit(_victim, url, victim, stop, 10)
        codes = flood()
        stop.set()
        return measured.result(), codes


def measure(label: str, database_url: str, args, extra_env: dict) -> None:
    from ingestion_pipeline_tests.api.conftest import start_server, user_token

    with tempfile.TemporaryDirectory() as tmp, start_server(database_url, Path(tmp), **extra_env) as server:
        attacker = {"Authorization": f"Bearer {user_token(database_url, 'acme', f'flood-{label}@acme.example')}"}
        victim = {"Authorization": f"Bearer {user_token(database_url, 'globex', f'reader-{label}@globex.example')}"}
        stop = threading.Event()
        stop.set()
        idle = _victim(server.url, victim, stop, 30)

        def searches() -> Counter:
            def one(_):
                return httpx.get(f"{server.url}/v1/search", params={"q": LONG_QUERY, "k": 50}, headers=attacker,
                                 timeout=300).status_code
            with ThreadPoolExecutor(args.concurrency) as pool:
                return Counter(pool.map(one, range(args.searches)))

        def logins() -> Counter:
            def one(n):
                return httpx.post(f"{server.url}/v1/auth/token", timeout=300,
                                  json={"email": f"nobody{n % 7}@acme.example", "password": f"guess-{n}"}).status_code
            with ThreadPoolExecutor(args.concurrency) as pool:
                return Counter(pool.map(one, range(args.logins)))

        during_search, search_codes = _during(server.url, victim, searches)
        during_login, login_codes = _during(server.url, victim, logins)
        print(f"{label:10} idle            {_figures(idle)}", flush=True)
        print(f"{label:10} search flood    {_figures(during_search)}   flood got {dict(search_codes)}", flush=True)
        print(f"{label:10} login flood     {_figures(during_login)}   flood got {dict(login_codes)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--shares", default="default", help="comma-separated INGESTION_API_SEARCHES_PER_TENANT "
                        "values to measure with the limits on ('default': the setting's default, half the cores)")
    parser.add_argument("--no-off", action="store_true", help="skip the run with the limits off")
    args = parser.parse_args()
    from throwaway_database import throwaway_database

    print("another tenant's search latency, ms (one search at a time)")
    with throwaway_database("bench_fairness") as url:
        if not args.no_off:
            measure("off", url, args, OFF)
        for share in args.shares.split(","):
            measure(f"on/{share}"[:10], url, args,
                    {} if share == "default" else {"INGESTION_API_SEARCHES_PER_TENANT": share})


if __name__ == "__main__":
    main()
