"""The web app's bounds: a cross-site sign-in, a stream whose credentials end, a stream that falls behind, a question
set over its limits, LibreOffice's environment and links, a failed render that costs only the images."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.requests import Request

from ingestion_pipeline.api import security
from ingestion_pipeline.api.file_events import QUEUE_BOUND, _offer
from ingestion_pipeline.core import users
from ingestion_pipeline.core.access_tokens import issue_token
from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline.documents import office_pages
from ingestion_pipeline.documents.steps.page_images import keep_office_page_images, keep_page_images
from ingestion_pipeline_tests.api.conftest import SECRET


@pytest.mark.parametrize("headers", [{"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"},
                                     {"origin": "https://evil.example"}])
def test_a_sign_in_form_posted_from_another_site_is_refused(api, headers):
    r = api.client.post("/app/sign-in", headers=headers, data={"email": "admin@acme.example", "password": "x"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site"
    assert "ingestion_session" not in r.cookies


def test_a_sign_in_form_from_this_site_is_checked_as_a_login(api):
    r = api.client.post("/app/sign-in", headers={"sec-fetch-site": "same-origin"},
                        data={"email": "admin@acme.example", "password": "wrong"}, follow_redirects=False)
    assert r.status_code == 401 and "wrong email or password" in r.text


def _request(api, headers: dict[str, str]) -> Request:
    request = Request({"type": "http", "method": "GET", "path": "/v1/files/events", "query_string": b"",
                       "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
                       "app": api.client.app})
    return request


def test_a_long_streams_credentials_are_checked_again(api, database):
    acme = security.verify_token(api.tokens["acme-user"], SECRET)
    assert security.still_signed_in(_request(api, {"Authorization": f"Bearer {api.tokens['acme-user']}"}))
    expired = issue_token(acme, SECRET, expiry_seconds=60, now=0)
    assert not security.still_signed_in(_request(api, {"Authorization": f"Bearer {expired}"}))
    assert not security.still_signed_in(_request(api, {"Cookie": "ingestion_session=not-a-token"}))
    assert not security.still_signed_in(_request(api, {}))
    with database.connection() as conn:
        users.disable_user(conn, "user@acme.example", tenant_id="acme")
    api.services._active.clear()  # looked up again now, not after ACTIVE_CHECK_SECONDS
    assert not security.still_signed_in(_request(api, {"Authorization": f"Bearer {api.tokens['acme-user']}"}))


def test_a_stream_that_falls_behind_drops_its_notices_and_reads_everything_again():
    async def run() -> list:
        queue: asyncio.Queue = asyncio.Queue(QUEUE_BOUND)
        for file_id in range(QUEUE_BOUND + 5):
            _offer(queue, file_id)
        return [queue.get_nowait() for _ in range(queue.qsize())]

    assert asyncio.run(run()) == [None, *range(QUEUE_BOUND + 1, QUEUE_BOUND + 5)]


@pytest.mark.parametrize("questions, message", [
    ("not json", "line 1"),
    (json.dumps({"id": "q1", "document": "d", "kind": "natural", "language": "en", "question": "x" * 1001,
                 "answer": "two words"}), "over 1000 characters"),
    ("\n".join(json.dumps({"id": f"q{i}", "document": "d", "kind": "natural", "language": "en", "question": "q",
                           "answer": "two words"}) for i in range(501)), "at most 500"),
    ("", "holds no question"),
])
def test_a_question_set_over_its_bounds_is_refused_saying_why(api, questions, message):
    r = api.client.post("/v1/search/evaluations", headers=api.as_("acme-user"), json={"questions": questions})
    assert r.status_code == 400 and message in r.json()["error"]["message"], r.text


def test_libreoffice_gets_none_of_this_processs_environment_and_no_network(monkeypatch, tmp_path):
    monkeypatch.setenv("JWT_SECRET", "a secret LibreOffice must never see")
    monkeypatch.setenv("DATABASE_URL", "postgresql://user:password@db/ingestion")
    monkeypatch.setattr(office_pages, "soffice_binary", lambda: "/usr/bin/soffice")
    monkeypatch.setattr(office_pages, "_can_leave_the_network", lambda: True)
    seen: dict = {}

    class Stopped(Exception):
        pass

    def popen(command, **kwargs):
        seen.update(command=command, **kwargs)
        raise Stopped

    monkeypatch.setattr(subprocess, "Popen", popen)
    source = tmp_path / "a file; rm -rf.docx"
    source.write_bytes(b"PK")
    with pytest.raises(Stopped), office_pages.converted_to_pdf(source, ".docx", memory_mb=512):
        pass
    assert set(seen["env"]) == {"PATH", "HOME", "LANG", "TMPDIR"}
    assert seen["command"][:6] == ["unshare", "--net", "--", "prlimit", f"--as={512 << 20}", "--"]
    assert seen["command"][-1].endswith("document.docx")  # the upload's own name never reaches the command line
    assert seen["start_new_session"] and "preexec_fn" not in seen


@pytest.mark.skipif(office_pages.soffice_binary() is None, reason="LibreOffice is not installed")
def test_a_documents_field_naming_a_file_of_this_host_does_not_pull_it_in(tmp_path):
    import pypdfium2 as pdfium
    from docx import Document
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-ZEBRA-42")
    document = Document()
    document.add_paragraph("Before the field.")
    document.add_paragraph()._p.append(parse_xml(
        f'<w:fldSimple {nsdecls("w")} w:instr=\'INCLUDETEXT "{secret}"\'><w:r><w:t>as saved</w:t></w:r></w:fldSimple>'))
    document.save(tmp_path / "include.docx")
    with office_pages.converted_to_pdf(tmp_path / "include.docx", ".docx") as pdf:
        text = "".join(page.get_textpage().get_text_bounded() for page in pdfium.PdfDocument(str(pdf)))
    assert "Before the field." in text and "TOPSECRET" not in text


def test_a_render_or_store_that_fails_costs_the_images_never_the_file(tmp_path):
    class BrokenStore:
        def put_view(self, *args):
            raise OSError("the disk is full")

    class Extractor:
        def render(self, path, first, last, ocr_words=None):
            return [SimpleNamespace(page_number=1, image=b"jpeg", layout=lambda: b"{}")]

        def survey(self, path, look_beyond):
            raise RuntimeError("the worker died")

    run = SimpleNamespace(extract_file=Extractor(), store=BrokenStore(),
                          settings=SimpleNamespace(limits=SimpleNamespace(page_images=True, memory_mb=512,
                                                                          timeout_seconds=30.0)))
    row = {"file_id": 1, "tenant_id": "acme", "content_hash": "ab" * 32}
    assert keep_page_images(run, row, Path("a.pdf"), 1, 3) == 0
    if office_pages.soffice_binary() is not None:
        source = tmp_path / "a.docx"
        from docx import Document

        Document().save(source)
        assert keep_office_page_images(run, row, source, ".docx") == 0


def test_the_pages_allow_the_upload_buckets_origin_for_presigned_puts(api, monkeypatch):
    with_bucket = ApiSettings(jwt_secret=SECRET, upload_bucket="uploads", upload_s3_endpoint="http://127.0.0.1:9000")
    monkeypatch.setattr(api.services, "api", with_bucket)
    r = api.client.get("/app/sign-in")
    assert "connect-src 'self' http://127.0.0.1:9000;" in r.headers["content-security-policy"]
    monkeypatch.setattr(api.services, "api", ApiSettings(jwt_secret=SECRET))
    assert "connect-src 'self';" in api.client.get("/app/sign-in").headers["content-security-policy"]
