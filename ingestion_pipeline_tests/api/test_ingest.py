"""POST /v1/ingest in-process: queued, duplicate, skipped; bad input refused with nothing left behind;
stable keys make versions; deactivation; and the whole path from token to a cited search hit."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from ingestion_pipeline.cli import main as cli_main
from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline_tests.api.conftest import SECRET, make_api
from ingestion_pipeline_tests.helpers import process_in_process, table

FACT = b"# Warehouse notes\n\nThe Leeds warehouse stores exactly 7,431 pallets of blue paint.\n"


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _ingest(api, who: str, name: str, body: bytes, **data):
    return api.client.post("/v1/ingest", headers=api.as_(who), files={"file": (name, body, "text/plain")}, data=data)


def _left_behind(upload_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(upload_dir)) for p in upload_dir.rglob("*") if p.is_file()) \
        if upload_dir.exists() else []


@pytest.mark.integration
def test_end_to_end_token_upload_process_poll_search(api, database, instance):
    token = api.client.post("/v1/auth/token", json={"email": "user@acme.example",
                                                    "password": "correct horse battery"}).json()["access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    r = api.client.post("/v1/ingest", headers=headers, files={"file": ("warehouse.md", FACT, "text/markdown")},
                        data={"title": "Warehouse notes"})
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["status"] == "queued" and accepted["file_id"] and accepted["doc_id"]
    assert accepted["run_id"] == accepted["file_id"]  # the field's old name, still sent
    assert api.client.get(f"/v1/files/{accepted['file_id']}", headers=headers).json()["status"] == "queued"

    process_in_process(instance, database)  # what `process` (or upload_sensor's run) does with the queue

    run = api.client.get(f"/v1/files/{accepted['file_id']}", headers=headers).json()
    assert run["status"] == "succeeded" and run["dagster_run_id"] and run["stats"]["chunks"] >= 1
    old_path = api.client.get(f"/v1/ingestion-runs/{accepted['file_id']}", headers=headers).json()
    assert old_path == run  # the path's old name answers the same, and is marked deprecated
    operations = api.client.get("/openapi.json").json()["paths"]
    assert operations["/v1/ingestion-runs/{file_id}"]["get"]["deprecated"] is True
    assert "deprecated" not in operations["/v1/files/{file_id}"]["get"]
    hits = api.client.get("/v1/search", params={"q": "how many pallets of blue paint in Leeds", "k": 3},
                          headers=headers).json()["hits"]
    assert hits and "7,431 pallets" in hits[0]["source"]["text"]
    assert hits[0]["source"]["doc_id"] == accepted["doc_id"] and hits[0]["citation"].startswith("Warehouse notes (v1")
    # the other tenant sees nothing
    assert api.client.get("/v1/search", params={"q": "blue paint"}, headers=api.as_("globex-user")).json()["hits"] == []

    again = _ingest(api, "acme-user", "warehouse.md", FACT)
    assert again.status_code == 200 and again.json()["status"] == "skipped"
    docs = api.client.get("/v1/documents", headers=headers).json()
    assert docs["total"] == 1 and docs["items"][0]["is_active"]
    detail = api.client.get(f"/v1/documents/{accepted['doc_id']}", headers=headers).json()
    assert [v["version_number"] for v in detail["versions"]] == [1]


def test_same_bytes_while_queued_are_one_run(api, caplog):
    caplog.set_level("INFO", logger="ingestion_pipeline.api")
    first = _ingest(api, "acme-user", "a.txt", FACT).json()
    [line] = [json.loads(r.getMessage()) for r in caplog.records if "ingest_job_submitted" in r.getMessage()]
    assert line["tenant_id"] == "acme" and line["doc_id"] == first["doc_id"]
    assert line["file_id"] == line["run_id"] == first["file_id"]  # the old name, still logged
    assert line["dedup"] == "queued" and line["filename"] == "a.txt" and line["size_bytes"] == len(FACT)
    assert line["sha256"] == first["sha256"] and line["source_uri"].startswith("upload://sha256:")
    assert line["user_id"]
    second = _ingest(api, "acme-admin", "a.txt", FACT)
    assert second.status_code == 202 and second.json()["status"] == "duplicate"
    assert second.json()["file_id"] == first["file_id"]


@pytest.mark.parametrize("case", ["type", "size", "not_multipart", "no_file", "truncated", "empty", "bad_key",
                                  "two_files"])
def test_bad_uploads_are_refused_and_leave_nothing(case, database, db, isolated_storage, monkeypatch):
    monkeypatch.setenv("INGESTION_MAX_UPLOAD_BYTES", "1000")
    api = make_api(database, ApiSettings(jwt_secret=SECRET))
    headers = api.as_("acme-user")
    boundary = "XyZ"
    if case == "type":
        r = _ingest(api, "acme-user", "tool.exe", b"MZ\x90\x00")
    elif case == "size":
        r = _ingest(api, "acme-user", "big.txt", b"x" * 5000)
    elif case == "not_multipart":
        r = api.client.post("/v1/ingest", headers=headers, content=b"hello")
    elif case == "no_file":
        r = api.client.post("/v1/ingest", headers=headers, data={"title": "only a title"},
                            files={"other": ("a.txt", b"abc", "text/plain")})
    elif case == "truncated":
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
                "Content-Type: text/plain\r\n\r\nhalf a file").encode()
        r = api.client.post("/v1/ingest", content=body,
                            headers={**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"})
    elif case == "empty":
        r = _ingest(api, "acme-user", "a.txt", b"")
    elif case == "bad_key":
        r = _ingest(api, "acme-user", "a.txt", FACT, key="../escape")
    else:
        two = [("file", ("a.txt", b"one", "text/plain")), ("file", ("b.txt", b"two", "text/plain"))]
        r = api.client.post("/v1/ingest", headers=headers, files=two)
    expected = {"type": 415, "size": 413}.get(case, 400)
    assert r.status_code == expected, (case, r.status_code, r.text)
    assert set(r.json()["error"]) == {"code", "message"} and r.json()["error"]["message"]
    assert table(db, "SELECT file_id FROM ingestion_runs") == []
    assert _left_behind(isolated_storage) == []


@pytest.mark.integration
def test_a_stable_key_makes_versions_and_deactivation_stops_serving(api, database, instance, db, tmp_path):
    v1 = _ingest(api, "acme-user", "handbook.md", FACT, key="handbook").json()
    process_in_process(instance, database)
    edited = FACT.replace(b"7,431", b"9,999")
    v2 = _ingest(api, "acme-user", "handbook.md", edited, key="handbook").json()
    assert v2["status"] == "queued" and v2["doc_id"] == v1["doc_id"]
    assert v2["source_uri"] == "upload-key://acme/handbook"
    process_in_process(instance, database)
    detail = api.client.get(f"/v1/documents/{v1['doc_id']}", headers=api.as_("acme-user")).json()
    assert [(v["version_number"], v["is_active"]) for v in detail["versions"]] == [(2, True), (1, False)]
    hits = api.client.get("/v1/search", params={"q": "pallets of blue paint"}, headers=api.as_("acme-user")).json()
    texts = " ".join(h["source"]["text"] for h in hits["hits"])
    assert "9,999" in texts and "7,431" not in texts  # the old text is no longer served
    # without a key, the edited bytes are a second document (content-addressed, as before)
    unkeyed = _ingest(api, "acme-user", "handbook.md", edited).json()
    assert unkeyed["doc_id"] != v1["doc_id"]
    assert _ingest(api, "acme-user", "handbook.md", edited, key="handbook").json()["status"] == "skipped"

    assert api.client.post(f"/v1/documents/{v1['doc_id']}/deactivate", headers=api.as_("acme-user")).status_code == 403
    r = api.client.delete(f"/v1/documents/{v1['doc_id']}", headers=api.as_("acme-admin"))
    assert r.status_code == 200 and r.json()["deactivated_version_id"]
    hits = api.client.get("/v1/search", params={"q": "pallets of blue paint"}, headers=api.as_("acme-user")).json()
    assert all(h["source"]["doc_id"] != v1["doc_id"] for h in hits["hits"])
    inactive = api.client.get("/v1/documents", params={"status": "inactive"}, headers=api.as_("acme-user")).json()
    assert [d["doc_id"] for d in inactive["items"]] == [v1["doc_id"]]
    assert table(db, "SELECT count(*) AS n FROM document_versions WHERE doc_id = %s", v1["doc_id"])[0]["n"] == 2


@pytest.mark.integration  # whole runs through the CLI
def test_cli_submit_key_and_documents_deactivate(database, db, project_dagster_home, tmp_path, capsys):
    note = tmp_path / "policy.txt"
    note.write_bytes(FACT)
    assert cli_main(["submit", str(note), "--tenant", "acme", "--key", "policy", "--json"]) == 0
    assert "upload-key://acme/policy" in capsys.readouterr().out
    assert cli_main(["process"]) == 0
    doc_id = table(db, "SELECT doc_id FROM documents WHERE source_uri = 'upload-key://acme/policy'")[0]["doc_id"]
    assert cli_main(["documents", "deactivate", str(doc_id), "--tenant", "globex"]) == 2  # not globex's
    assert cli_main(["documents", "deactivate", str(doc_id), "--tenant", "acme"]) == 0
    assert table(db, "SELECT count(*) AS n FROM document_versions WHERE doc_id = %s AND is_active", doc_id)[0]["n"] == 0
