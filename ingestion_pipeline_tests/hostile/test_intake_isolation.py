"""The isolation matrix over every intake: a document that tenant acme sends by HTTP, the CLI, a Redis job, an
SQS job, an S3 event or a source's listing is searchable and listed by acme only — never by globex, whose own
document (by HTTP) acme never sees. One unique phrase per intake, the real pipeline in between."""

from __future__ import annotations

import hashlib

import dagster as dg
import pytest

from ingestion_pipeline.core.settings import ApiSettings, load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.resources import S3Clients
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.queues import s3_events
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import push
from ingestion_pipeline.queues.sqs import accept_sqs_job, parse_sqs_job
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.registry import add_source
from ingestion_pipeline.sources.sync_pass import sync_sources
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.cli.test_corpus_cli import run_cli
from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch, put

PHRASES = {  # intake -> a phrase only its document holds
    "http": "obsidian heron ledger", "cli": "cobalt lantern treaty", "redis": "amber falcon quarry",
    "sqs": "saffron glacier motion", "s3-event": "juniper comet harbor", "source": "velvet tundra compass",
}
GLOBEX = "crimson walrus archive"


def _doc(phrase: str) -> bytes:
    return f"# Notes\n\nThe {phrase} is discussed in this memo about the quarterly plan.\n".encode()


@pytest.mark.integration
def test_every_intake_keeps_its_tenant(database, db, bucket, s3_env, redis_queue, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env)
    client, name = bucket
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    assert api.client.post("/v1/ingest", headers=api.as_("acme-user"),
                           files={"file": ("http.md", _doc(PHRASES["http"]), "text/markdown")}).status_code == 202
    assert api.client.post("/v1/ingest", headers=api.as_("globex-user"),
                           files={"file": ("g.md", _doc(GLOBEX), "text/markdown")}).status_code == 202

    (tmp_path / "cli.md").write_bytes(_doc(PHRASES["cli"]))
    run_cli("submit", str(tmp_path / "cli.md"), "--tenant", "acme")

    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    (root / "redis.md").write_bytes(_doc(PHRASES["redis"]))
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)
    push(redis_queue, new_job("kb1", str(root / "redis.md")))
    store_dir = load_settings().upload.upload_dir
    RedisJobConsumer(redis_queue, database, LocalUploadStore(store_dir), fingerprint=api.services.fingerprint,
                     max_bytes=10**6).consume(5)

    sqs_body = _doc(PHRASES["sqs"])
    put(client, name, "jobs/sqs.md", sqs_body)
    with database.connection() as conn:
        locations.bind(conn, "acme", locations.location(name, "jobs/"), by="test")
    job = {"tenant": "acme", "upload_uri": f"s3://{name}/jobs/sqs.md", "filename": "sqs.md",
           "content_hash": hashlib.sha256(sqs_body).hexdigest(), "job_id": "iso-sqs"}
    assert accept_sqs_job(database, LocalUploadStore(store_dir), parse_sqs_job(job, "m"), S3Clients(S3Resource())(None),
                          fingerprint=api.services.fingerprint, max_bytes=10**6, message=job) == "accepted"

    with database.connection() as conn:
        add_source(conn, f"s3://{name}/kb/", tenant_id="acme", name="iso-kb", endpoint_url=s3_env)
    put(client, name, "kb/source.md", _doc(PHRASES["source"]))
    sync_sources(database, load_settings(), S3Clients(S3Resource()), None)
    put(client, name, "kb/event.md", _doc(PHRASES["s3-event"]))
    event = s3_events.ObjectEvent(name, "kb/event.md", "ObjectCreated:Put", None)
    assert s3_events.apply_event(database, event, lambda s: S3Clients(S3Resource())(s.endpoint_url),
                                 max_bytes_for=lambda s: 10**6, metric_intake_for=lambda s, c: None) == "applied"

    with dg.instance_for_test() as instance:
        for key in batch_queued(database):
            materialize_batch(instance, key)

    def hits(who: str, phrase: str) -> list[str]:
        r = api.client.get("/v1/search", params={"q": phrase, "k": 10}, headers=api.as_(who))
        assert r.status_code == 200, r.text
        return [h["source"]["text"] for h in r.json()["hits"] if phrase in h["source"]["text"]]

    for intake, phrase in PHRASES.items():
        assert hits("acme-user", phrase), f"{intake}: acme does not find its own document"
        assert hits("globex-user", phrase) == [], f"{intake}: globex finds acme's document"
    assert hits("globex-user", GLOBEX) and hits("acme-user", GLOBEX) == []
    listed = api.client.get("/v1/documents", headers=api.as_("globex-user")).json()
    assert [d["filename"] for d in listed["items"]] == ["g.md"]
    assert len(api.client.get("/v1/documents", headers=api.as_("acme-user")).json()["items"]) == len(PHRASES)


def test_rags_of_two_tenants_may_not_nest(database, tmp_path):
    """A rag root inside another tenant's (or around it) let one tenant's jobs ingest the other's files."""
    from ingestion_pipeline.queues.rag_registry import list_rags

    (tmp_path / "shared" / "globex").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    with database.transaction() as conn:
        add_rag(conn, "kb_globex", tenant_id="globex", root=tmp_path / "shared" / "globex")
    for root in (tmp_path / "shared", tmp_path / "shared" / "globex"):
        with database.transaction() as conn, pytest.raises(ValueError, match="overlaps rag kb_globex's root"):
            add_rag(conn, "kb_acme", tenant_id="acme", root=root)
    with database.transaction() as conn:
        add_rag(conn, "kb_acme", tenant_id="acme", root=tmp_path / "elsewhere")
        add_rag(conn, "kb_globex2", tenant_id="globex", root=tmp_path / "shared")  # its own tenant's: allowed
        assert sorted(r.rag_id for r in list_rags(conn)) == ["kb_acme", "kb_globex", "kb_globex2"]
