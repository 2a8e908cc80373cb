"""INGESTION_UPLOAD_STORE=s3://…: documents and metric exports wait in S3, and runs read them from there."""

import io

import dagster as dg
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.metrics.uploads import submit_metric_file
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.services import document_store, metric_store
from ingestion_pipeline_tests.defs.test_metric_assets import counts, run_upload
from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch, submit, table

pytestmark = pytest.mark.integration  # whole runs with the store in a real S3 API (moto)


@pytest.fixture
def s3_store(bucket, s3_endpoint, monkeypatch, isolated_storage):
    client, name = bucket
    monkeypatch.setenv("INGESTION_UPLOAD_STORE", f"s3://{name}/store")
    monkeypatch.setenv("INGESTION_UPLOAD_STORE_ENDPOINT_URL", s3_endpoint)
    return client, name


def keys(client, name) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=name).get("Contents", []))


def test_documents_wait_in_s3_and_each_is_downloaded_once(s3_store, database, db, corpus_dir, isolated_storage):
    client, name = s3_store
    memo, notes = corpus_dir / "documents" / "list-item-example.pdf", corpus_dir / "documents" / "codeblock.md"
    results = submit(database, "acme", memo, notes)
    assert keys(client, name) == sorted(f"store/documents/acme/{r.sha256}" for r in results)
    rows = table(db, "SELECT raw_path, size_bytes FROM ingestion_runs ORDER BY file_id")
    assert [r["raw_path"] for r in rows] == [f"s3://{name}/store/documents/acme/{r.sha256}" for r in results]
    with dg.instance_for_test() as instance:
        for key in batch_queued(database):
            assert materialize_batch(instance, key).success
    done = table(db, "SELECT status, size_bytes, stats FROM ingestion_runs ORDER BY file_id")
    assert [r["status"] for r in done] == ["succeeded", "succeeded"]
    assert [r["stats"]["raw_fetched_bytes"] for r in done] == [r["size_bytes"] for r in done]
    assert len(table(db, "SELECT 1 FROM document_versions WHERE is_active")) == 2
    assert keys(client, name) == []  # released once promoted, as the local store's files are
    assert not any(p.is_file() for p in (isolated_storage / "uploads").rglob("*"))  # no local copy left behind


@pytest.mark.parametrize("damage", ["deleted", "changed"])
def test_a_missing_or_changed_object_fails_the_file_permanently(s3_store, database, db, corpus_dir, damage):
    client, name = s3_store
    [result] = submit(database, "acme", corpus_dir / "documents" / "codeblock.md")
    key = f"store/documents/acme/{result.sha256}"
    if damage == "deleted":
        client.delete_object(Bucket=name, Key=key)
    else:
        client.put_object(Bucket=name, Key=key, Body=b"# not the bytes that were submitted\n")
    with dg.instance_for_test() as instance:
        [batch] = batch_queued(database)
        materialize_batch(instance, batch, raise_on_error=False)
    [row] = table(db, "SELECT status, error_code, attempts, error FROM ingestion_runs")
    expected = {"deleted": "raw_missing", "changed": "raw_checksum_mismatch"}[damage]
    assert (row["status"], row["error_code"], row["attempts"]) == ("failed", expected, 1)
    assert "submit the file again" in row["error"]


def test_a_metric_export_waits_in_s3_and_is_promoted(s3_store, database, db, tmp_path):
    client, name = s3_store
    path = write_export(tmp_path / "export.csv", "meta", daily_rows(2, 2, 2, 5))
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, metric_store(load_settings()), workspace_id="acme", platform="meta",
                                       filename=path.name, stream=stream, max_bytes=50 * 2**20)
    [row] = table(db, "SELECT raw_path, content_hash FROM data_uploads")
    assert row["raw_path"] == f"s3://{name}/store/metrics/acme/{row['content_hash']}"
    with dg.instance_for_test() as instance:
        assert run_upload(instance, submitted.partition_key).success
    assert counts(db)["daily_metrics"] == 40
    assert table(db, "SELECT status FROM data_uploads")[0]["status"] == "completed"


def test_a_metric_submit_reads_the_start_of_the_object_not_all_of_it(s3_store, database, db, tmp_path,
                                                                      monkeypatch):
    """Without --platform, submit looks at the export's start (binary? whose columns?) through ranged GETs."""
    from ingestion_pipeline.core.s3_ranged_reader import S3RangedReader
    from ingestion_pipeline.core.s3_upload_store import S3UploadStore

    path = write_export(tmp_path / "export.csv", "meta", daily_rows(20, 10, 10, 30))  # 6,000 rows
    fetched: list[int] = []
    readinto = S3RangedReader.readinto

    def counted(self, buffer) -> int:
        fetched.append(readinto(self, buffer))
        return fetched[-1]

    def no_download(*_args, **_kwargs):
        raise AssertionError("submit downloaded the whole object")

    monkeypatch.setattr(S3RangedReader, "readinto", counted)
    monkeypatch.setattr(S3UploadStore, "local_copy", no_download)
    store = metric_store(load_settings())
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, store, workspace_id="acme", platform=None, filename=path.name,
                                       stream=stream, max_bytes=50 * 2**20)
    assert (submitted.status, submitted.platform) == ("pending", "meta"), submitted.reason
    assert path.stat().st_size > 3 * 2**20 and fetched == [2**20]  # one ranged GET of the first MiB

    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\x00" * (3 * 2**20))
    with binary.open("rb") as stream:
        refused = submit_metric_file(database, store, workspace_id="acme", platform=None, filename=binary.name,
                                     stream=stream, max_bytes=50 * 2**20)
    assert refused.status == "rejected" and "all NUL bytes" in refused.reason
    assert not [k for k in keys(*s3_store) if k.endswith(refused.sha256)]  # released: nothing is left


def test_an_unreachable_store_is_a_transient_error_at_submit(monkeypatch, isolated_storage, s3_env):
    monkeypatch.setenv("INGESTION_UPLOAD_STORE", "s3://nowhere/store")
    monkeypatch.setenv("INGESTION_UPLOAD_STORE_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    store = document_store(load_settings())
    with pytest.raises(Exception, match="Could not connect|Connect"):
        store.put("acme", io.BytesIO(b"x"))


def test_a_bad_store_uri_names_the_variable(monkeypatch):
    monkeypatch.setenv("INGESTION_UPLOAD_STORE", "bucket/prefix")
    with pytest.raises(ValueError, match="INGESTION_UPLOAD_STORE must be s3://bucket or s3://bucket/prefix"):
        load_settings()
