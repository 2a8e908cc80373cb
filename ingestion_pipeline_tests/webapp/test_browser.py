"""The web app as a person uses it: a real Chromium (Debian's, driven by Playwright) against `ingestion-pipeline serve`,
the pipeline run by `ingestion-pipeline process`. Sign in, upload two files, watch them move in the history without
reloading it, find a passage by a question and follow its citation to the page, where the passage is outlined."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.documents.extraction.ocr import tesseract_binary
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages
from ingestion_pipeline.sources import registry
from ingestion_pipeline_tests.api.conftest import PASSWORD, start_server, user_token

pytestmark = pytest.mark.integration
CHROMIUM = os.environ.get("INGESTION_TEST_CHROMIUM", "/usr/bin/chromium")
# a root-run Chromium needs --no-sandbox; the rest keep it off this machine's closed network
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip("Chromium is not installed: `make` installs Debian's chromium where it runs as root")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists()
                                          else shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def server(database_url, tmp_path, model_cache):
    with start_server(database_url, tmp_path, INGESTION_PAGE_IMAGES="true") as running:
        yield running


def _until(condition, what: str) -> None:
    """Poll ``condition`` until it holds (a page's own script cannot be asked: its CSP allows no eval)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, f"not seen within {WAIT_MS / 1000:.0f} s: {what}"
        time.sleep(0.2)


def _process(server) -> str:
    """The pipeline over what is queued, as `make demo` runs it, on the server's database and store."""
    done = subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "process"], env=server.env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _sign_in(page, server) -> None:
    page.goto(f"{server.url}/app/documents")
    assert "/app/sign-in" in page.url  # a page asked without a session goes to sign in, and comes back after
    page.fill("input[name=email]", server.email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/app/documents")


HOSTILE_TEXT = (b'<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>\n'
                b"The acme widget weighs exactly forty-two grams and ships in a blue box.\n")
QUESTIONS = "\n".join(json.dumps(q) for q in [
    {"id": "w1", "document": "layout-parser-paper-fast.pdf", "kind": "natural", "language": "en",
     "question": "software for analysing scanned pages with neural networks",
     "answer": "Recent advances in document image analysis (DIA) have been primarily driven"},
    {"id": "w2", "document": "layout-parser-paper-fast.pdf", "kind": "lookup", "language": "en",
     "question": "what is the moon made of", "answer": "the moon is made of green cheese"}])


PIER = ("The keeper wrote that the great storm of 1893 tore the northern pier from its footings and carried "
        "its timbers two miles down the coast.")


def _lighthouse_docx(path: Path) -> Path:
    """A three-page DOCX whose storm passage is on its last page (a heading and a page break before each page)."""
    from docx import Document

    document = Document()
    filler = ("The lamp was trimmed at dusk and the log was kept in the keeper's own hand, each entry dated and "
              "signed, with the weather, the ships that passed and the oil that was burned. ") * 6
    for number, (title, text) in enumerate([("The station", filler), ("The keepers", filler),
                                            ("The storm", PIER + " " + filler)]):
        if number:
            document.add_page_break()
        document.add_heading(title, level=1)
        document.add_paragraph(text)
    document.save(path)
    return path


def _screenshot(page, tmp_path: Path, name: str) -> None:
    """Kept as the test's artifacts: in INGESTION_TEST_ARTIFACTS when set (CI), else beside the test's files."""
    folder = Path(os.environ.get("INGESTION_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"web-app-{name}.png"), full_page=True)


def test_upload_watch_search_and_follow_a_citation_to_its_outlined_passage(browser, server, corpus_dir, tmp_path,
                                                                         database_url):
    context = browser.new_context()
    history = context.new_page()
    _sign_in(history, server)
    session = next(c for c in context.cookies() if c["name"] == "ingestion_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert history.locator("#documents .empty").is_visible()

    history.goto(f"{server.url}/app/files")
    history.wait_for_selector("#live.on", timeout=WAIT_MS)  # the event stream is open

    upload = context.new_page()
    upload.goto(f"{server.url}/app/upload")
    pdf = corpus_dir / "documents" / "layout-parser-paper-fast.pdf"
    docx = _lighthouse_docx(tmp_path / "lighthouse.docx")
    widget = tmp_path / "widget.txt"
    widget.write_bytes(HOSTILE_TEXT)
    locked = corpus_dir / "broken" / "password.pdf"
    upload.set_input_files("#files", [str(pdf), str(docx), str(widget), str(locked)])
    _until(lambda: upload.locator("#uploads li[data-result]").count() == 4, "four uploads answered")
    assert upload.locator('#uploads li[data-result="queued"]').count() == 4, upload.locator("#uploads").inner_text()
    _screenshot(upload, tmp_path, "upload")

    # the history shows all four, queued, pushed to it: the page was never reloaded
    rows = history.locator("#files tbody tr")
    _until(lambda: history.locator("#files tbody tr[data-status=queued]").count() == 4, "four files queued")
    output = _process(server)
    _until(lambda: history.locator("#files tbody tr[data-status=succeeded]").count() == 3, "three files succeeded")
    _until(lambda: history.locator("#files tbody tr[data-status=failed]").count() == 1, "the locked PDF failed")
    assert rows.count() == 4, output
    # each file was seen queued, then running, then done, as it happened
    seen = {row.locator(".name").inner_text(): row.get_attribute("data-seen") for row in rows.all()}
    assert seen["layout-parser-paper-fast.pdf"] == "queued running succeeded", seen
    assert seen["password.pdf"].startswith("queued running") and seen["password.pdf"].endswith("failed"), seen
    failed = history.locator("#files tbody tr[data-status=failed]")
    assert "pdf_password_protected" in failed.locator(".progress").inner_text()
    _screenshot(history, tmp_path, "history")
    failed.locator("button.retry").click()  # an admin replays it: queued again, at once
    _until(lambda: history.locator("#files tbody tr[data-status=queued]").count() == 1, "the replay queued")
    assert "7 chunks" in rows.filter(has_text="layout-parser-paper-fast.pdf").locator(".progress").inner_text()

    # the same bytes again: the page says it is already there
    upload.set_input_files("#files", [str(pdf)])
    upload.wait_for_selector('#uploads li[data-result="duplicate"]', timeout=WAIT_MS)

    documents = context.new_page()
    documents.goto(f"{server.url}/app/documents")
    assert documents.locator("#documents tbody tr").count() == 3
    assert "served" in documents.locator("#documents tbody").inner_text()
    _screenshot(documents, tmp_path, "documents")

    search = context.new_page()
    search.goto(f"{server.url}/app/search?q=" + "software for analysing scanned pages with neural networks")
    search.wait_for_selector("#hits li", timeout=WAIT_MS)
    first = search.locator("#hits li").first
    assert "LayoutParser" in first.locator(".citation").inner_text()
    first.locator(".citation").click()
    search.wait_for_url("**/app/documents/*chunk=*")
    search.wait_for_selector("figure.page .box", timeout=WAIT_MS)
    selected = search.locator(".chunk.selected")
    assert selected.count() == 1
    box = search.locator("figure.page .box").first
    figure = box.locator("xpath=..")
    # the outline lies on the page the citation named, and inside it
    assert figure.get_attribute("data-page") == search.url.split("page=")[1].split("&")[0]
    outline, page_box = box.bounding_box(), figure.bounding_box()
    assert outline["width"] > 20 and outline["height"] > 5
    assert page_box["x"] <= outline["x"] and outline["x"] + outline["width"] <= page_box["x"] + page_box["width"] + 1
    assert search.locator("figure.page img").first.evaluate("img => img.naturalWidth") > 500
    _screenshot(search, tmp_path, "inspector")
    acme_pdf_url = search.url

    # the DOCX, laid out as pages by LibreOffice: its citation opens the page its passage is on, outlined
    docx_id = documents.locator("#documents tbody tr", has_text="lighthouse.docx").get_attribute("data-doc-id")
    text_id = documents.locator("#documents tbody tr", has_text="widget.txt").get_attribute("data-doc-id")
    search.goto(f"{server.url}/app/search?type=docx&q=" + "which storm wrecked the harbour's jetty")
    search.wait_for_selector("#hits li", timeout=WAIT_MS)
    # filtered to DOCX files: every hit is the lighthouse's
    assert all("lighthouse" in text for text in search.locator("#hits .citation").all_inner_texts())
    assert search.locator("#f-type").input_value() == "docx"
    first = search.locator("#hits li").first
    first.locator(".citation").click()
    search.wait_for_url(f"**/app/documents/{docx_id}?*")
    search.wait_for_selector("figure.page .box", timeout=WAIT_MS)
    boxed = {search.locator("figure.page .box").nth(i).locator("xpath=..").get_attribute("data-page")
             for i in range(search.locator("figure.page .box").count())}
    assert boxed == {"3"}, boxed
    assert search.locator("figure.page").count() == 3
    _screenshot(search, tmp_path, "inspector-docx")

    # markup in a file's text is shown as text, never run
    documents.goto(f"{server.url}/app/documents/{text_id}")
    documents.wait_for_selector("#chunks li", timeout=WAIT_MS)
    assert '<script>window.pwned=2</script>' in documents.locator("#chunks").inner_text()
    assert documents.evaluate("window.pwned") is None
    assert documents.locator("#chunks img").count() == 0

    # a second version of the text file: the inspector lists both, each a link; and a scan, read by OCR
    widget.write_bytes(HOSTILE_TEXT + b"It was repainted green in the spring.\n")
    scan = write_scanned_pages(tmp_path / "harbour-scan.pdf", [[
        "Minutes of the harbour board", "The ferry sails twice daily from the northern quay."]])
    upload.set_input_files("#files", [str(widget), str(scan)])
    _until(lambda: upload.locator('#uploads li[data-result="queued"]').count() == 6, "the new version queued")
    _process(server)
    if tesseract_binary() is not None:  # make installs it where it can
        _scanned_page_shows_its_words(documents, server, tmp_path)
    documents.goto(f"{server.url}/app/documents/{text_id}")
    documents.wait_for_selector("#versions a", timeout=WAIT_MS)
    assert documents.locator("#versions").inner_text().split() == ["versions:", "2", "(served)", "1"]
    assert "repainted green" in documents.locator("#chunks").inner_text()

    # the retrieval test: figures per kind, and the miss with what came back instead
    evaluation = context.new_page()
    evaluation.goto(f"{server.url}/app/evaluation")
    evaluation.fill("#questions", QUESTIONS)
    evaluation.click("#evaluation-form button")
    evaluation.wait_for_selector('#figures tr[data-group="all"]', timeout=WAIT_MS)
    cells = evaluation.locator('#figures tr[data-group="natural"] td').all_inner_texts()
    assert cells[:4] == ["natural", "1", "1", "1"], cells  # the question, found first
    assert evaluation.locator("#misses > li").count() == 1
    assert evaluation.locator('#misses li[data-id="w2"] .got li').count() >= 1
    _screenshot(evaluation, tmp_path, "evaluation")

    # sources: an admin pauses and resumes one
    with Database(database_url) as database, database.connection() as conn:
        registry.add_source(conn, "s3://acme-bucket/kb/", tenant_id="acme", name="acme-kb")
    sources = context.new_page()
    sources.goto(f"{server.url}/app/sources")
    sources.wait_for_selector("#sources tbody tr", timeout=WAIT_MS)
    sources.click('button[data-action="pause"]')
    sources.wait_for_selector('#sources tr[data-status="paused"] button[data-action="resume"]', timeout=WAIT_MS)
    sources.click('button[data-action="resume"]')
    sources.wait_for_selector('#sources tr[data-status="syncing"]', timeout=WAIT_MS)
    context.close()

    # another tenant's user sees none of it, typed URLs included
    _other_tenants_user_sees_nothing(browser, server, database_url, acme_pdf_url, text_id)


def _scanned_page_shows_its_words(documents, server, tmp_path: Path) -> None:
    """The scan's page is marked as read by OCR; its words are outlined on demand, and so is a chunk on it."""
    documents.goto(f"{server.url}/app/documents")
    documents.wait_for_selector("#documents tbody tr", timeout=WAIT_MS)
    scan_id = documents.locator("#documents tbody tr", has_text="harbour-scan.pdf").get_attribute("data-doc-id")
    documents.goto(f"{server.url}/app/documents/{scan_id}")
    documents.wait_for_selector('figure.page[data-ocr="true"] button.words-toggle', timeout=WAIT_MS)
    documents.click("button.words-toggle")
    documents.wait_for_selector("figure.page .word", timeout=WAIT_MS)
    assert "ferry" in [w.get_attribute("title") for w in documents.locator("figure.page .word").all()]
    documents.locator("#chunks li").first.click()
    documents.wait_for_selector("figure.page .box", timeout=WAIT_MS)
    _screenshot(documents, tmp_path, "inspector-ocr")


def _other_tenants_user_sees_nothing(browser, server, database_url, acme_inspector_url: str, acme_doc: str) -> None:
    user_token(database_url, "globex", "reader@globex.example")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/app/sign-in")
    page.fill("input[name=email]", "reader@globex.example")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/app/documents")
    assert page.locator("#documents .empty").is_visible()
    page.goto(acme_inspector_url)
    _until(lambda: page.locator("#doc-meta").inner_text() != "", "the inspector answered")
    assert page.locator("#doc-meta").inner_text() == "no document version"
    assert page.locator("figure.page, #chunks li").count() == 0
    doc_id = acme_inspector_url.split("/app/documents/")[1].split("?")[0]
    for path in (f"/v1/documents/{doc_id}/pages/1/image", f"/v1/documents/{acme_doc}/chunks"):
        response = page.goto(server.url + path)
        assert response.status == 404, path
    page.goto(f"{server.url}/app/search?q=" + "software for analysing scanned pages with neural networks")
    _until(lambda: "passages" in page.locator("#search-status").inner_text(), "the search answered")
    assert page.locator("#hits li").count() == 0
    page.goto(f"{server.url}/app/files")
    assert page.locator("#files tbody tr").count() == 0
    context.close()


def test_with_an_upload_bucket_the_browser_puts_the_bytes_to_it_by_a_presigned_url(
        browser, database_url, tmp_path, model_cache, bucket, s3_env):
    """A deployment with an upload bucket: the page asks the API for a presigned PUT, sends the file's bytes
    straight to the bucket (its origin allowed by the page's CSP, nothing else), completes the upload, and the
    file is queued and then served; the bytes never pass through the API."""
    client, name = bucket
    with start_server(database_url, tmp_path, INGESTION_UPLOAD_BUCKET=name, INGESTION_UPLOAD_S3_ENDPOINT=s3_env,
                      INGESTION_PAGE_IMAGES="true") as server:
        context = browser.new_context()
        page = context.new_page()
        _sign_in(page, server)
        policy = page.goto(f"{server.url}/app/upload").headers["content-security-policy"]
        assert f"connect-src 'self' {s3_env}" in policy, policy
        note = tmp_path / "harbour-note.txt"
        note.write_text("The harbour master keeps the tide tables in the blue ledger by the door.\n")
        sent = []
        page.on("request", lambda request: sent.append((request.method, request.url)))
        page.set_input_files("#files", [str(note)])
        _until(lambda: page.locator("#uploads li[data-result]").count() == 1, "the upload answered")
        assert page.locator('#uploads li[data-result="queued"]').count() == 1, page.locator("#uploads").inner_text()
        puts = [url for method, url in sent if method == "PUT" and url.startswith(f"{s3_env}/{name}/")]
        assert len(puts) == 1 and "/acme/" in puts[0], sent  # the bytes went to the bucket, under the tenant
        assert not [url for _, url in sent if "/v1/ingest" in url], sent  # not streamed to the API
        _process(server)
        documents = context.new_page()
        documents.goto(f"{server.url}/app/documents")
        documents.wait_for_selector("#documents tbody tr", timeout=WAIT_MS)
        assert "harbour-note.txt" in documents.locator("#documents tbody").inner_text()
        context.close()


def test_a_request_signed_in_by_cookie_must_carry_the_pages_csrf_token(browser, server):
    context = browser.new_context()
    page = context.new_page()
    _sign_in(page, server)
    cookie = {c["name"]: c["value"] for c in context.cookies()}
    token = page.locator("body").get_attribute("data-csrf")
    with httpx.Client(base_url=server.url, cookies=cookie) as client:
        assert client.get("/v1/documents").status_code == 200  # reading needs the cookie only
        refused = client.post("/v1/documents/1/deactivate")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
        forged_token = token[:-1] + ("1" if token.endswith("0") else "0")  # never the token itself
        forged = client.post("/v1/documents/1/deactivate", headers={"X-CSRF-Token": forged_token})
        assert forged.status_code == 403
        # with the page's token it goes through to the route (no such document here)
        assert client.post("/v1/documents/1/deactivate", headers={"X-CSRF-Token": token}).status_code == 404
        assert client.post("/app/sign-out").status_code == 403  # another site cannot sign a user out
    page.click("form.who button")
    page.wait_for_url("**/app/sign-in")
    page.goto(f"{server.url}/app/files")
    assert "/app/sign-in" in page.url
    context.close()
