"""Every name a sender gives is bounded as a file system bounds it (255 bytes a name, 4,096 a path), refused
with a specific error that quotes only its start, at every entrance: HTTP, a Redis job, an SQS job, a source.

Before: ``/v1/ingest`` accepted an 8 MB filename (stored, logged, then echoed in listings); a Redis job whose
path had a 300-character component failed as ``ERR_INTERNAL``."""

from __future__ import annotations

import json

import pytest

from ingestion_pipeline.core.file_types import BadFileName, check_file_name
from ingestion_pipeline.queues.jobs import MalformedJob, new_job, parse_job
from ingestion_pipeline.queues.sqs import parse_sqs_job
from ingestion_pipeline.sources.sync import skip_reason
from ingestion_pipeline_tests.helpers import table

SHA = "0" * 64


@pytest.mark.parametrize("name", ["a" * 252 + ".md", "é" * 126 + ".md", "résumé.pdf"])
def test_names_a_file_system_takes_pass(name):
    assert check_file_name(name) == name


@pytest.mark.parametrize(("name", "why"), [("a" * 253 + ".md", "256 bytes"), ("é" * 127 + ".md", "257 bytes"),
                                          ("", "empty"), ("..", "not a file name"), ("a\x00b.md", "NUL"),
                                          ("a/b.md", "'/'")])
def test_names_it_does_not_are_refused(name, why):
    with pytest.raises(BadFileName, match=why):
        check_file_name(name)


def test_a_huge_upload_filename_is_refused_and_not_echoed(api):
    name = "x" * (8 * 1024 * 1024) + ".md"
    response = api.client.post("/v1/ingest", headers=api.as_("acme-user"),
                               files={"file": (name, b"# A\n", "text/markdown")})
    assert response.status_code == 400, response.text[:300]
    body = response.json()
    assert body["error"]["code"] == "invalid_filename" and "over the 255-byte limit" in body["error"]["message"]
    assert len(response.content) < 2000
    with api.services.db.connection() as conn:
        assert table(conn, "SELECT file_id FROM ingestion_runs") == []


def test_a_redis_job_with_a_path_no_file_system_takes_is_malformed(tmp_path):
    long_component = str(tmp_path / ("d" * 300) / "a.md")
    with pytest.raises(MalformedJob, match="longer than a path may be"):
        parse_job(new_job("kb1", long_component).to_json())
    job = json.loads(new_job("kb1", str(tmp_path / "a.md")).to_json())
    with pytest.raises(MalformedJob, match="filename: file name of 300 bytes"):
        parse_job(json.dumps({**job, "filename": "f" * 297 + ".md"}))


def test_an_sqs_job_and_a_source_object_with_a_long_name_are_refused():
    body = {"tenant": "acme", "upload_uri": "s3://bucket/k.md", "content_hash": SHA, "filename": "f" * 300 + ".md"}
    with pytest.raises(MalformedJob, match="over the 255-byte limit"):
        parse_sqs_job(body, "m1")
    assert "over the 255-byte limit" in skip_reason("folder/" + "k" * 300 + ".md", 10, 100)
    assert skip_reason("folder/sub/k.md", 10, 100) is None  # a key's folders are not its name
