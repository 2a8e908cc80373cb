"""What waits in the document ledger, per tenant and per batch, and when it should be done.

The estimate is the rate at which the tenant's files finished lately (``RATE_WINDOW_SECONDS``): that rate
already holds what the tenant's share of the run slots, its files' sizes and the model's speed make of it.
Asked for one tenant (the HTTP API: a tenant's own view), everything comes from that tenant's own files:
another tenant's activity, even as a rate shared out, is not the caller's to see, so a tenant with nothing
finished lately has no estimate (None). The deployment's view (the CLI, every tenant) gives a tenant with
nothing finished lately the deployment's recent rate divided among the tenants with work waiting; with nothing
finished anywhere lately there is no estimate rather than a guess. Batches are done in the order they run:
those with a running file first, then by their first file, the files not yet in a batch last. Counted in
files: a file's tokens are not known before it is extracted, and the embed step's own ETA (in tokens) takes
over once a batch runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg

RATE_WINDOW_SECONDS = 600.0
MIN_SPAN_SECONDS = 1.0  # a burst of files that finished at once is not an infinite rate
BATCHES_SHOWN = 50  # per tenant; the rest are counted in the tenant's totals


@dataclass(frozen=True)
class BatchBacklog:
    partition_key: str | None  # None: queued, not in a batch yet
    queued: int
    running: int
    eta_seconds: float | None  # until this batch's last file should be done


@dataclass(frozen=True)
class TenantBacklog:
    tenant_id: str
    queued: int
    running: int
    files_per_second: float | None  # the rate the estimate uses
    rate_from: str  # "tenant" (its own files lately), "deployment" (a share of everyone's), "none"
    eta_seconds: float | None
    batches: tuple[BatchBacklog, ...]

    def as_dict(self) -> dict:
        return asdict(self) | {"batches": [asdict(b) for b in self.batches]}


_WAITING = """
SELECT tenant_id, partition_key,
       count(*) FILTER (WHERE status = 'queued') AS queued,
       count(*) FILTER (WHERE status = 'running') AS running,
       min(file_id) AS first_file
  FROM ingestion_runs
 WHERE status IN ('queued', 'running') AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
 GROUP BY tenant_id, partition_key
"""

_FINISHED = """
SELECT tenant_id, count(*) AS finished,
       greatest(EXTRACT(EPOCH FROM now() - min(finished_at)), %(min_span)s) AS span
  FROM ingestion_runs
 WHERE finished_at > now() - make_interval(secs => %(window)s)
   AND status IN ('succeeded', 'failed', 'dead_letter', 'canceled')
   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
 GROUP BY tenant_id
"""


def backlog(conn: psycopg.Connection, *, tenant_id: str | None = None,
            window_seconds: float = RATE_WINDOW_SECONDS) -> list[TenantBacklog]:
    """Every tenant with files queued or running (or only ``tenant_id``, listed even with nothing waiting, from
    its own files alone)."""
    waiting = conn.execute(_WAITING, {"tenant": tenant_id}).fetchall()
    finished = conn.execute(_FINISHED, {"window": window_seconds, "min_span": MIN_SPAN_SECONDS,
                                        "tenant": tenant_id}).fetchall()
    rates = {r["tenant_id"]: r["finished"] / float(r["span"]) for r in finished}
    groups: dict[str, list[dict]] = {}
    for row in waiting:
        groups.setdefault(row["tenant_id"], []).append(row)
    if tenant_id is not None:
        groups.setdefault(tenant_id, [])
    share = sum(rates.values()) / max(1, len(groups)) if rates and tenant_id is None else None
    return [_tenant(tenant, rows, rates.get(tenant), share) for tenant, rows in sorted(groups.items())]


def _tenant(tenant_id: str, rows: list[dict], own_rate: float | None, share_rate: float | None) -> TenantBacklog:
    if own_rate:
        rate, rate_from = own_rate, "tenant"
    elif share_rate:
        rate, rate_from = share_rate, "deployment"
    else:
        rate, rate_from = None, "none"
    # running batches first, then by their first file; files not in a batch yet last
    ordered = sorted(rows, key=lambda r: (r["partition_key"] is None, r["running"] == 0, r["first_file"]))
    batches, done = [], 0
    for row in ordered:
        done += row["queued"] + row["running"]
        batches.append(BatchBacklog(row["partition_key"], row["queued"], row["running"],
                                    round(done / rate, 1) if rate else None))
    queued = sum(r["queued"] for r in rows)
    running = sum(r["running"] for r in rows)
    eta = round((queued + running) / rate, 1) if rate else None
    return TenantBacklog(tenant_id, queued, running, round(rate, 3) if rate else None, rate_from, eta,
                         tuple(batches[:BATCHES_SHOWN]))


def describe(item: TenantBacklog, batches: int = 3) -> str:
    """One line for a terminal: ``acme: 120 queued, 4 running at 3.2 files/s, done in ~39 s (…)``."""
    if not item.queued and not item.running:
        return f"{item.tenant_id}: nothing waiting"
    if item.eta_seconds is None:
        pace = "no file finished lately: no estimate yet"
    else:
        share = " (a share of the deployment's)" if item.rate_from == "deployment" else ""
        pace = f"at {item.files_per_second:g} files/s{share}, done in ~{_duration(item.eta_seconds)}"
    shown = ", ".join(f"{b.partition_key or 'not batched'} {b.queued + b.running} "
                      f"~{_duration(b.eta_seconds)}" for b in item.batches[:batches] if b.eta_seconds is not None)
    more = f" +{len(item.batches) - batches} batches" if len(item.batches) > batches else ""
    return f"{item.tenant_id}: {item.queued} queued, {item.running} running {pace}" + \
        (f" ({shown}{more})" if shown else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
