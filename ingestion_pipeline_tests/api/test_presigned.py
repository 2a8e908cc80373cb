"""Presigned uploads against a moto S3 server: PUT to the signed URL, complete, queued like /v1/ingest."""

from __future__ import annotations

import dagster as dg
import httpx
import pytest

from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.helpers import code_location, table

BODY = b"Quarterly report: the Oslo office opened 3 new meeting rooms.\n" * 20


@pytest.fixture
def s3_api(database, bucket, s3_env):
    client, name = bucket
    api = make_api(database, ApiSettings(jwt_secret=SECRET, upload_bucket=name, upload_s3_endpoint=s3_env))
    return api, client, name


def _objects(client, name) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=name).get("Contents", [])]


def _start(api, filename="report.txt", size: int | None = None, content_type="text/plain", who="acme-user"):
    return api.client.post("/v1/uploads", headers=api.as_(who), json={
        "filename": filename, "size_bytes": len(BODY) if size is None else size, "content_type": content_type})


def test_presigned_put_then_complete_queues_the_file_once(s3_api, db, isolated_storage):
    api, client, name = s3_api
    r = _start(api)
    assert r.status_code == 201, r.text
    upload = r.json()
    assert upload["method"] == "PUT" and "X-Amz-Signature=" in upload["url"] and "X-Amz-Expires=900" in upload["url"]
    assert "content-length" in upload["url"].lower()  # the declared size is part of the signature
    put = httpx.put(upload["url"], content=BODY, headers=upload["headers"])
    assert put.status_code == 200, put.text
    done = api.client.post(f"/v1/uploads/{upload['upload_id']}/complete", headers=api.as_("acme-user"))
    assert done.status_code == 202, done.text
    result = done.json()
    assert result["status"] == "queued" and result["size_bytes"] == len(BODY)
    assert _objects(client, name) == []  # the bytes are in the upload store now, not left in the bucket
    row = table(db, "SELECT tenant_id, raw_path, content_hash FROM ingestion_runs WHERE file_id = %s",
                result["file_id"])[0]
    assert row["tenant_id"] == "acme" and row["content_hash"] == result["sha256"]
    again = api.client.post(f"/v1/uploads/{upload['upload_id']}/complete", headers=api.as_("acme-user"))
    assert again.json()["file_id"] == result["file_id"]  # completing twice queues once
    assert len(table(db, "SELECT file_id FROM ingestion_runs")) == 1


def test_refusals_before_and_after_the_put(s3_api, db, isolated_storage):
    api, client, name = s3_api
    assert _start(api, filename="x.exe", content_type="application/octet-stream").status_code == 415
    assert _start(api, filename="a.pdf", content_type="text/html").status_code == 415
    assert _start(api, size=60 * 1024 * 1024).status_code == 413
    early = _start(api).json()
    r = api.client.post(f"/v1/uploads/{early['upload_id']}/complete", headers=api.as_("acme-user"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_uploaded"
    # more bytes than declared: refused at completion, the object removed, nothing queued
    small = _start(api, size=10).json()
    httpx.put(small["url"], content=BODY, headers=small["headers"])
    r = api.client.post(f"/v1/uploads/{small['upload_id']}/complete", headers=api.as_("acme-user"))
    assert r.status_code == 413, r.text
    assert not any(small["upload_id"] in key for key in _objects(client, name))
    assert table(db, "SELECT file_id FROM ingestion_runs") == []
    assert [p for p in isolated_storage.rglob("*") if p.is_file()] == []


def test_uploads_never_completed_are_removed_by_the_retention_job(s3_api, db, s3_env, monkeypatch):
    api, client, name = s3_api
    upload = _start(api).json()
    fresh = _start(api).json()
    for u in (upload, fresh):
        httpx.put(u["url"], content=BODY, headers=u["headers"])
    assert len(_objects(client, name)) == 2
    db.execute("UPDATE api_uploads SET expires_at = now() - interval '2 hours' WHERE upload_id = %s",
               (upload["upload_id"],))
    monkeypatch.setenv("INGESTION_UPLOAD_BUCKET", name)
    monkeypatch.setenv("INGESTION_UPLOAD_S3_ENDPOINT", s3_env)
    job = code_location().resolve_job_def("raw_file_retention_job")  # what the hourly schedule runs
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(instance=instance).success
    assert [k for k in _objects(client, name) if upload["upload_id"] in k] == []
    assert [k for k in _objects(client, name) if fresh["upload_id"] in k]  # still within its 15 minutes + grace
    r = api.client.post(f"/v1/uploads/{upload['upload_id']}/complete", headers=api.as_("acme-user"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "expired"


@pytest.fixture
def s3_store_api(database, bucket, s3_env, monkeypatch, isolated_storage):
    """The API with the S3 upload store, in the bucket presigned uploads go to."""
    client, name = bucket
    monkeypatch.setenv("INGESTION_UPLOAD_STORE", f"s3://{name}/store")
    monkeypatch.setenv("INGESTION_UPLOAD_STORE_ENDPOINT_URL", s3_env)
    api = make_api(database, ApiSettings(jwt_secret=SECRET, upload_bucket=name, upload_s3_endpoint=s3_env))
    return api, client, name


def _start_declared(api, sha256: str):
    return api.client.post("/v1/uploads", headers=api.as_("acme-user"), json={
        "filename": "report.txt", "size_bytes": len(BODY), "content_type": "text/plain", "sha256": sha256})


def test_with_the_s3_store_a_declared_sha256_completes_by_a_server_side_copy(s3_store_api, db, caplog):
    import hashlib
    import logging

    api, client, name = s3_store_api
    sha = hashlib.sha256(BODY).hexdigest()
    upload = _start_declared(api, sha).json()
    assert "x-amz-checksum-sha256" in upload["headers"]  # signed: S3 checks the bytes against it
    assert httpx.put(upload["url"], content=BODY, headers=upload["headers"]).status_code == 200
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        done = api.client.post(f"/v1/uploads/{upload['upload_id']}/complete", headers=api.as_("acme-user"))
    assert done.status_code == 202, done.text
    assert done.json()["sha256"] == sha
    requests = [r.getMessage() for r in caplog.records if r.name == "werkzeug"]
    assert [m for m in requests if '"HEAD ' in m and upload["upload_id"] in m]  # the server's log is seen here
    assert not [m for m in requests if '"GET ' in m and upload["upload_id"] in m]  # its bytes did not pass through
    assert _objects(client, name) == [f"store/documents/acme/{sha}"]
    [row] = table(db, "SELECT raw_path FROM ingestion_runs")
    assert row["raw_path"] == f"s3://{name}/store/documents/acme/{sha}"


def test_a_declared_sha256_that_lies_fails_the_file_when_a_worker_reads_it(s3_store_api, database, db):
    """moto does not check the signed checksum as S3 does; the worker's download, which hashes, still catches it."""
    from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch

    api, client, name = s3_store_api
    upload = _start_declared(api, "ab" * 32).json()
    httpx.put(upload["url"], content=BODY, headers=upload["headers"])
    assert api.client.post(f"/v1/uploads/{upload['upload_id']}/complete",
                           headers=api.as_("acme-user")).status_code == 202
    with dg.instance_for_test() as instance:
        for key in batch_queued(database):
            materialize_batch(instance, key, raise_on_error=False)
    [row] = table(db, "SELECT status, error_code FROM ingestion_runs")
    assert (row["status"], row["error_code"]) == ("failed", "raw_checksum_mismatch")
    assert table(db, "SELECT 1 FROM document_versions") == []


def test_with_the_local_store_a_declared_sha256_is_checked_too(s3_api, db, isolated_storage):
    """The upload store on disk streams and hashes the object: a declared SHA-256 it does not match is refused
    at complete (before: accepted, the declaration ignored)."""
    api, client, name = s3_api
    upload = _start_declared(api, "ab" * 32).json()
    assert httpx.put(upload["url"], content=BODY, headers=upload["headers"]).status_code == 200
    done = api.client.post(f"/v1/uploads/{upload['upload_id']}/complete", headers=api.as_("acme-user"))
    assert done.status_code == 400, done.text
    assert done.json()["error"]["code"] == "checksum_mismatch"
    assert table(db, "SELECT file_id FROM ingestion_runs") == []
    assert list(isolated_storage.rglob("*.tmp")) == []
    [row] = table(db, "SELECT status FROM api_uploads WHERE upload_id = %s", upload["upload_id"])
    assert row["status"] == "rejected" and _objects(client, name) == []
