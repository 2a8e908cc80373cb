"""`GET /v1/files/backlog`: the caller's tenant's files waiting, per batch, with their ETA."""

from __future__ import annotations

from ingestion_pipeline_tests.documents.test_backlog import ledger  # noqa: F401 - the fixture


def test_the_api_answers_the_callers_tenant_only(api, ledger):  # noqa: F811
    answer = api.client.get("/v1/files/backlog", headers=api.as_("globex-user"))
    assert answer.status_code == 200
    body = answer.json()
    assert (body["tenant_id"], body["queued"], body["running"], body["rate_from"]) == ("globex", 2, 0, "none")
    assert body["files_per_second"] is None  # acme's finishing rate, shared out, is not globex's to see
    assert [b["partition_key"] for b in body["batches"]] == [None]
    assert api.client.get("/v1/files/backlog").status_code == 401
