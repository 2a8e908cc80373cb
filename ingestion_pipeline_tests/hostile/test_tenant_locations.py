"""An S3 location belongs to a tenant by the operator's configuration, never by a request: a tenant admin
cannot register another tenant's bucket, a job cannot name another tenant's object or an unknown tenant, and
the project's own buckets (presigned uploads not yet complete, the upload store) are never anyone's source.

Before: ``POST /v1/sources {"uri": "s3://<B's bucket>/secret/"}`` from A's admin was 201, a sync, and A's search
returned B's confidential text; an SQS job for A naming B's object was accepted into A; an unknown tenant was
created; ``ERR_CHECKSUM`` printed the object's real SHA-256."""

from __future__ import annotations

import hashlib

import pytest

from ingestion_pipeline.core.settings import ApiSettings, load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.resources import S3Clients
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.queues.sqs import accept_sqs_job, parse_sqs_job
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.registry import add_source, get_source
from ingestion_pipeline.sources.sync_pass import sync_sources
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


def test_a_tenant_admin_cannot_register_another_tenants_bucket(database, db, bucket, s3_env):
    client, name = bucket
    client.put_object(Bucket=name, Key="secret/plan.md", Body=b"# Plan\n\nglobex's confidential merger.\n")
    with database.connection() as conn:
        locations.bind(conn, "globex", locations.location(name, "", s3_env), by="test")
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    r = api.client.post("/v1/sources", headers=api.as_("acme-admin"),
                        json={"uri": f"s3://{name}/secret/", "endpoint_url": s3_env})
    assert r.status_code == 403 and r.json()["error"]["code"] == "location_not_bound"
    assert table(db, "SELECT * FROM ingestion_sources") == []
    [refused] = table(db, "SELECT tenant_id, action, entrance, location FROM tenant_s3_location_audit "
                          "WHERE action = 'refused'")
    assert (refused["tenant_id"], refused["entrance"]) == ("acme", "source add (request)")
    assert refused["location"] == f"s3://{name}/secret/ at {s3_env}"
    # the operator cannot bind it to acme either while globex holds the bucket
    with database.connection() as conn, pytest.raises(ValueError, match="overlaps .* bound to another tenant"):
        locations.bind(conn, "acme", locations.location(name, "secret/", s3_env), by="test")


def test_the_projects_own_buckets_are_nobodys(database, db, monkeypatch):
    monkeypatch.setenv("INGESTION_UPLOAD_BUCKET", "presigned-uploads")
    monkeypatch.setenv("INGESTION_UPLOAD_STORE", "s3://upload-store/prefix")
    for bucket in ("presigned-uploads", "upload-store"):
        with database.connection() as conn, pytest.raises(ValueError, match="project's own buckets"):
            add_source(conn, f"s3://{bucket}/api-uploads/globex/", tenant_id="acme")
        with database.connection() as conn, pytest.raises(locations.LocationNotBound, match="project's own"):
            locations.require(conn, "acme", locations.location(bucket, "api-uploads/"), entrance="test")


def test_a_process_without_the_upload_bucket_setting_still_refuses_it(database, db, monkeypatch, tmp_path):
    """Before: the guard knew the upload bucket only from INGESTION_UPLOAD_BUCKET, which compose set for the API
    alone; `tenant bind` then accepted it, and an SQS job pulled another tenant's pending upload."""
    monkeypatch.delenv("INGESTION_UPLOAD_BUCKET", raising=False)
    with database.connection() as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('globex'), ('acme') ON CONFLICT DO NOTHING")
        conn.execute("""INSERT INTO api_uploads (tenant_id, filename, content_type, size_bytes, bucket, object_key,
                                                 expires_at)
                        VALUES ('globex', 'merger.pdf', 'application/pdf', 10, 'uploads-b', 'api-uploads/globex/x',
                                now() + interval '1 hour')""")
        assert "uploads-b" in locations.reserved_buckets(conn)
        assert "uploads-b" not in locations.reserved_buckets()  # this process's settings alone do not know it
    refused = run_cli("tenant", "bind", "acme", "s3://uploads-b/api-uploads/", check=False)
    assert refused.returncode != 0 and "project's own buckets" in refused.stderr
    message = {"tenant": "acme", "upload_uri": "s3://uploads-b/api-uploads/globex/x", "filename": "merger.pdf",
               "content_hash": "0" * 64}
    outcome = accept_sqs_job(database, LocalUploadStore(tmp_path / "store"), parse_sqs_job(message, "m"), None,
                             fingerprint="fp", max_bytes=10**6, message=message)
    assert outcome == "failed"
    [row] = table(db, "SELECT outcome FROM queue_jobs")
    assert row["outcome"]["error_code"] == "ERR_LOCATION_NOT_BOUND"
    assert table(db, "SELECT * FROM tenant_s3_locations") == []


def test_an_unbound_source_stops_syncing_with_what_to_run(database, db, bucket, s3_env):
    client, name = bucket
    client.put_object(Bucket=name, Key="kb/a.md", Body=b"# A\n\nalpha\n")
    with database.connection() as conn:
        source = add_source(conn, f"s3://{name}/kb/", tenant_id="acme", endpoint_url=s3_env)  # the operator binds
        assert locations.unbind(conn, "acme", locations.location(name, "kb/", s3_env), by="test")
    assert sync_sources(database, load_settings(), S3Clients(S3Resource()), None) == []
    with database.connection() as conn:
        error = table(conn, "SELECT last_sync_error FROM ingestion_sources WHERE source_id = %s",
                      source.source_id)[0]["last_sync_error"]
        assert get_source(conn, source.name).tenant_id == "acme"
    assert "not inside a location bound to the tenant" in error and "tenant bind acme" in error
    assert table(db, "SELECT * FROM ingestion_runs") == []


def test_an_sqs_job_names_only_its_tenants_objects(database, db, bucket, s3_env, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env)
    client, name = bucket
    body = b"# Secret\n\nglobex only\n"
    client.put_object(Bucket=name, Key="globex/secret.md", Body=body)
    with database.connection() as conn:
        locations.bind(conn, "globex", locations.location(name, "globex/"), by="test")
        locations.bind(conn, "acme", locations.location(name, "acme/"), by="test")
    store = LocalUploadStore(tmp_path / "store")
    s3 = S3Clients(S3Resource())(None)

    def accept(tenant: str, job_id: str, content_hash: str) -> dict:
        job = parse_sqs_job({"tenant": tenant, "upload_uri": f"s3://{name}/globex/secret.md", "filename": "s.md",
                             "content_hash": content_hash, "job_id": job_id}, job_id)
        assert accept_sqs_job(database, store, job, s3, fingerprint="fp", max_bytes=10**6, message={}) == "failed"
        [row] = table(db, "SELECT outcome FROM queue_jobs WHERE job_id = %s", job_id)
        return row["outcome"]

    sha = hashlib.sha256(body).hexdigest()
    crossing = accept("acme", "job-cross", sha)
    assert crossing["error_code"] == "ERR_LOCATION_NOT_BOUND"
    unknown = accept("initech", "job-unknown", sha)
    assert unknown["error_code"] == "ERR_UNKNOWN_TENANT"
    assert table(db, "SELECT tenant_id FROM tenants WHERE tenant_id = 'initech'") == []
    wrong = accept("globex", "job-wrong-hash", "0" * 64)
    assert wrong["error_code"] == "ERR_CHECKSUM" and sha not in wrong["error"]  # the real hash is not told
    assert table(db, "SELECT file_id FROM ingestion_runs") == []


def test_the_operator_binds_from_the_cli(database, db):
    bound = json_lines(run_cli("tenant", "bind", "acme", "s3://acme-docs/kb/", "--json").stdout)
    assert bound == [{"tenant": "acme", "location": "s3://acme-docs/kb/", "changed": True}]
    again = json_lines(run_cli("tenant", "bind", "acme", "s3://acme-docs/kb/", "--json").stdout)
    assert again[0]["changed"] is False
    refused = run_cli("tenant", "bind", "globex", "s3://acme-docs/", check=False)
    assert refused.returncode != 0 and "overlaps s3://acme-docs/kb/" in refused.stderr
    [row] = json_lines(run_cli("tenant", "locations", "acme", "--json").stdout)
    assert (row["bucket"], row["prefix"], row["bound_by"].startswith("cli:")) == ("acme-docs", "kb/", True)
    audit = json_lines(run_cli("tenant", "audit", "--json").stdout)
    assert [a["action"] for a in audit] == ["bound"]


def test_a_taken_sqs_job_id_with_other_content_is_refused_not_dropped_and_ids_are_per_tenant(
        database, db, bucket, s3_env, tmp_path, monkeypatch):
    """Before: job ids were first come across tenants, and another tenant's later job with the same id was
    refused and deleted, its file never ingested."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env)
    client, name = bucket
    body, theirs = b"# Mine\n\nacme's text\n", b"# Theirs\n\nglobex's text\n"
    client.put_object(Bucket=name, Key="acme/mine.md", Body=body)
    client.put_object(Bucket=name, Key="globex/other.md", Body=theirs)
    with database.connection() as conn:
        locations.bind(conn, "acme", locations.location(name, "acme/"), by="test")
        locations.bind(conn, "globex", locations.location(name, "globex/"), by="test")
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('globex') ON CONFLICT DO NOTHING")
    store = LocalUploadStore(tmp_path / "store")
    s3 = S3Clients(S3Resource())(None)
    first = {"tenant": "acme", "upload_uri": f"s3://{name}/acme/mine.md", "filename": "mine.md",
             "content_hash": hashlib.sha256(body).hexdigest(), "job_id": "shared-id"}

    def accept(message: dict) -> str:
        return accept_sqs_job(database, store, parse_sqs_job(message, "m"), s3, fingerprint="fp", max_bytes=10**6,
                              message=message)

    assert accept(first) == "accepted"
    assert accept(first) == "already accepted"  # a redelivery
    same_id = {**first, "tenant": "globex", "upload_uri": f"s3://{name}/globex/other.md",
               "content_hash": hashlib.sha256(theirs).hexdigest()}
    assert accept(same_id) == "accepted"  # another tenant's id space
    assert accept(same_id) == "already accepted"
    assert accept({**first, "filename": "renamed.md"}) == "refused: job_id taken by another job"
    rows = table(db, "SELECT tenant_id, status FROM queue_jobs WHERE job_id = 'shared-id' ORDER BY tenant_id")
    assert [(r["tenant_id"], r["status"]) for r in rows] == [("acme", "queued"), ("globex", "queued")]


def test_a_source_name_another_tenant_holds_is_not_told(database, database_url, db, bucket, s3_env):
    """Tenant ids may hold '-': ``acme`` + ``x-kb`` and ``acme-x`` + ``kb`` make the same global name. Before: the
    second got 409 naming the first tenant's source; now a name of its own."""
    from ingestion_pipeline_tests.api.conftest import user_token

    _, name = bucket
    api = make_api(database, ApiSettings(jwt_secret=SECRET, allowed_s3_endpoints=(s3_env,)))
    other = {"Authorization": f"Bearer {user_token(database_url, 'acme-x', 'admin@acme-x.example', 'admin')}"}
    with database.connection() as conn:
        locations.bind(conn, "acme", locations.location(name, "acme/", s3_env), by="test")
        locations.bind(conn, "acme-x", locations.location(name, "acme-x/", s3_env), by="test")
    first = api.client.post("/v1/sources", headers=api.as_("acme-admin"),
                            json={"uri": f"s3://{name}/acme/", "endpoint_url": s3_env, "name": "x-kb"})
    second = api.client.post("/v1/sources", headers=other,
                             json={"uri": f"s3://{name}/acme-x/", "endpoint_url": s3_env, "name": "kb"})
    assert (first.status_code, second.status_code) == (201, 201), second.text
    assert first.json()["name"] == "acme-x-kb" and second.json()["name"].startswith("acme-x-kb-")
    again = api.client.post("/v1/sources", headers=other,
                            json={"uri": f"s3://{name}/acme-x/", "endpoint_url": s3_env, "name": "kb"})
    assert again.status_code == 409 and "acme-x-kb-" in again.json()["error"]["message"]  # its own, said
