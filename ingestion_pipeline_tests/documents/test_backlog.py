"""The ledger's backlog per tenant and batch, with an ETA at the rate the tenant's files finished lately: from
the domain function, `queue status` and `GET /v1/files/backlog`."""

from __future__ import annotations

import json

import pytest

from ingestion_pipeline.documents.backlog import backlog, describe
from ingestion_pipeline_tests.cli.test_corpus_cli import run_cli
from ingestion_pipeline_tests.helpers import submit


def _files(database, tmp_path, tenant: str, count: int) -> list[int]:
    paths = []
    for n in range(count):
        path = tmp_path / f"{tenant}-{n}.md"
        path.write_text(f"# {tenant} note {n}\n\nsomething only this file says: {tenant}-{n}\n")
        paths.append(path)
    return [r.file_id for r in submit(database, tenant, *paths)]


def _set(database, file_ids: list[int], **columns) -> None:
    with database.connection() as conn:
        for column, value in columns.items():  # column names are this test's own literals
            if column == "finished_ago":
                conn.execute("UPDATE ingestion_runs SET finished_at = now() - make_interval(secs => %s) "
                             "WHERE file_id = ANY(%s)", (value, file_ids))
            else:
                conn.execute(f"UPDATE ingestion_runs SET {column} = %s WHERE file_id = ANY(%s)", (value, file_ids))


@pytest.fixture
def ledger(database, tmp_path):
    """acme: 10 files finished over the last 100 s, 2 running in batch b1, 3 queued in b2, 1 not batched;
    globex: 2 queued and nothing finished."""
    acme = _files(database, tmp_path, "acme", 16)
    for n, file_id in enumerate(acme[:10]):
        _set(database, [file_id], status="succeeded", partition_key="acme-b0", finished_ago=100 - n * 10)
    _set(database, acme[10:12], status="running", partition_key="acme-b1")
    _set(database, acme[12:15], partition_key="acme-b2")
    _files(database, tmp_path, "globex", 2)
    return acme


def test_a_tenants_eta_follows_its_own_recent_rate_batch_by_batch(database, ledger):
    with database.connection() as conn:
        acme, globex = backlog(conn)
    assert (acme.tenant_id, acme.queued, acme.running, acme.rate_from) == ("acme", 4, 2, "tenant")
    assert acme.files_per_second == pytest.approx(0.1, rel=0.05)  # 10 files in the last ~100 s
    assert acme.eta_seconds == pytest.approx(60, rel=0.05)
    # the running batch first, then by first file, the files not in a batch yet last
    assert [(b.partition_key, b.queued, b.running) for b in acme.batches] == [
        ("acme-b1", 0, 2), ("acme-b2", 3, 0), (None, 1, 0)]
    assert [b.eta_seconds for b in acme.batches] == pytest.approx([20, 50, 60], rel=0.05)
    # nothing of globex's finished lately: a share of the deployment's rate (two tenants have work waiting)
    assert (globex.queued, globex.rate_from) == (2, "deployment")
    assert globex.files_per_second == pytest.approx(0.05, rel=0.05)
    assert globex.eta_seconds == pytest.approx(40, rel=0.05)
    assert describe(acme).startswith("acme: 4 queued, 2 running at 0.1")


def test_one_tenant_sees_only_its_own_and_an_idle_one_nothing(database, ledger):
    with database.connection() as conn:
        [globex] = backlog(conn, tenant_id="globex")
        [idle] = backlog(conn, tenant_id="initech")
        [acme] = backlog(conn, tenant_id="acme")
    assert globex.tenant_id == "globex" and {b.partition_key for b in globex.batches} == {None}
    # the deployment's rate, even shared out, would tell globex how busy acme is: from its own files only
    assert (globex.rate_from, globex.files_per_second, globex.eta_seconds) == ("none", None, None)
    assert acme.rate_from == "tenant" and acme.files_per_second == pytest.approx(0.1, rel=0.05)
    assert (idle.queued, idle.running, idle.batches) == (0, 0, ())
    assert describe(idle) == "initech: nothing waiting"


def test_another_tenants_activity_moves_nothing_a_tenant_is_told(database, ledger):
    with database.connection() as conn:
        before = backlog(conn, tenant_id="globex")[0].as_dict()
    _set(database, ledger[12:15], status="succeeded", partition_key="acme-b2", finished_ago=1)  # acme speeds up
    _set(database, ledger[10:12], status="queued")
    with database.connection() as conn:
        assert backlog(conn, tenant_id="globex")[0].as_dict() == before


def test_with_nothing_finished_lately_there_is_no_estimate(database, ledger):
    _set(database, ledger[:10], finished_ago=3600)
    with database.connection() as conn:
        acme, _ = backlog(conn)
    assert (acme.files_per_second, acme.rate_from, acme.eta_seconds) == (None, "none", None)
    assert {b.eta_seconds for b in acme.batches} == {None}
    assert "no estimate yet" in describe(acme)


@pytest.mark.integration
def test_queue_status_prints_the_ledgers_backlog(database, ledger, redis_queue, project_dagster_home):
    shown = run_cli("queue", "status")
    assert "files in the ledger (every intake):" in shown.stdout
    assert "acme: 4 queued, 2 running at 0.0" in shown.stdout or "acme: 4 queued, 2 running at 0.1" in shown.stdout
    assert "globex: 2 queued, 0 running" in shown.stdout
    printed = run_cli("queue", "status", "--json", "--tenant", "acme").stdout
    [status] = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    assert [t["tenant_id"] for t in status["backlog"]] == ["acme"]
    assert status["backlog"][0]["batches"][0] == {"partition_key": "acme-b1", "queued": 0, "running": 2,
                                                  "eta_seconds": pytest.approx(20, rel=0.05)}
