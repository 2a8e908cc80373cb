"""Property-based tests of the whole API from its own OpenAPI schema: the schemathesis CLI against a real
server, with a valid admin token. No 5xx, and every response matches the status codes, content types,
headers and bodies the schema declares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ingestion_pipeline_tests.api.conftest import start_server

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance")


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(database_url, tmp_path, bucket, s3_env):
    _client, name = bucket
    with start_server(database_url, tmp_path, INGESTION_UPLOAD_BUCKET=name, INGESTION_UPLOAD_S3_ENDPOINT=s3_env,
                      INGESTION_ALLOWED_S3_ENDPOINTS=s3_env) as server:
        # something to find: a document and a metric upload of the token's tenant
        for path, files, data in (
            ("/v1/ingest", {"file": ("note.txt", b"Schemathesis was here.\n", "text/plain")}, {}),
            ("/v1/metrics/uploads", {"file": ("m.csv", b"campaign_id,date\nc1,2024-01-01\n", "text/csv")},
             {"platform": "meta"}),
        ):
            r = httpx.post(server.url + path, headers=server.headers, files=files, data=data, timeout=60)
            assert r.status_code == 202, r.text
        argv = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{server.url}/openapi.json",
                "--header", f"Authorization: {server.headers['Authorization']}", "--checks", CHECKS,
                "--max-examples", "25", "--seed", "20261126", "--workers", "1", "--no-color",
                "--request-timeout", "60",
                # an open event stream never ends: it is followed by a browser in webapp/test_browser.py
                "--exclude-path", "/v1/files/events", "--suppress-health-check", "all", "--generation-database", "none"]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    summary = run.stdout[-6000:]
    print(summary)
    assert run.returncode == 0, summary + run.stderr[-2000:]
