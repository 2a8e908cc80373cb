"""What the web app reads: pages rendered at ingest (whole files and a big PDF's units), a chunk's boxes on its pages,
a version's chunks, the session cookie, the file events — each read by its own tenant only."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from ingestion_pipeline.api import web_session
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents import page_views
from ingestion_pipeline.documents.page_views import chunk_boxes, read_layout
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages
from ingestion_pipeline_tests.helpers import ingest, needs_tesseract

RUNS = [("LayoutParser", [0.3, 0.1, 0.5, 0.12]),           # a title word, also in the chunk's last sentence
        ("Abstract. Recent advances in", [0.2, 0.5, 0.6, 0.52]),
        ("document image analysis", [0.6, 0.5, 0.8, 0.52]),  # the same line: one box with the run before
        ("12", [0.5, 0.95, 0.52, 0.97]),                    # a page number
        ("have been primarily driven by neural", [0.2, 0.53, 0.8, 0.55]),
        ("networks. This paper introduces LayoutParser.", [0.2, 0.56, 0.8, 0.58])]
CHUNK = "Abstract. Recent advances in document image analysis have been primarily driven by neural networks. " \
        "This paper introduces LayoutParser."


def test_a_chunks_boxes_are_its_runs_in_order_merged_per_line_and_not_a_stray_word_of_it():
    boxes = chunk_boxes(RUNS, CHUNK)
    assert boxes == [[0.2, 0.5, 0.8, 0.52], [0.2, 0.53, 0.8, 0.55], [0.2, 0.56, 0.8, 0.58]]
    # a chunk that only begins on this page: its first part's runs, wherever they are in the chunk's text
    assert chunk_boxes(RUNS[:3], "the end of a paragraph before. " + CHUNK) == [[0.2, 0.5, 0.8, 0.52]]
    assert chunk_boxes(RUNS, "Nothing on this page at all.") == []
    assert chunk_boxes([], CHUNK) == []


FILLER = "The lamp was trimmed at dusk and the log was kept in the keeper's own hand"
LAID_OUT = {  # a DOCX as LibreOffice lays it out: the same filler on every page, the storm on page 3 and 4
    1: [("The station", [0.1, 0.1, 0.3, 0.12]), (FILLER, [0.1, 0.2, 0.9, 0.22])],
    2: [("The keepers", [0.1, 0.1, 0.3, 0.12]), (FILLER, [0.1, 0.2, 0.9, 0.22])],
    3: [(FILLER, [0.1, 0.2, 0.9, 0.22]), ("The storm", [0.1, 0.5, 0.3, 0.52]),
        ("The keeper wrote that the great storm of 1893 tore", [0.1, 0.9, 0.9, 0.92])],
    4: [("the northern pier from its footings.", [0.1, 0.05, 0.6, 0.07]), ("12", [0.5, 0.95, 0.52, 0.97]),
        (FILLER, [0.1, 0.2, 0.9, 0.22])],
}


def test_a_laid_out_chunk_is_found_on_the_page_that_holds_it_and_the_next_that_holds_its_end():
    storm = "The storm The keeper wrote that the great storm of 1893 tore the northern pier from its footings."
    assert [page for page, _ in page_views.find_chunk(LAID_OUT.get, storm, range(1, 5))] == [3, 4]
    # a chunk wholly on one page: the same filler on the pages beside it is not the chunk's rest
    assert [page for page, _ in page_views.find_chunk(LAID_OUT.get, "The keepers " + FILLER, range(1, 5))] == [2]
    assert page_views.find_chunk(LAID_OUT.get, "Nothing of the book at all.", range(1, 5)) == []
    assert page_views.find_chunk(lambda page: [], storm, range(1, 5)) == []


@pytest.mark.parametrize("stored", [b"", b"not json", b'{"runs": 3}', b'{"runs": [{"text": 1}]}', b"[]",
                                    b'{"ocr": true, "runs": [{"box": [0, 0, 1, 1]}]}',
                                    b'{"runs": [{"text": "a", "box": [NaN, 0, 1, 1]}]}',
                                    b'{"runs": [{"text": "a", "box": [0, 0, Infinity, 1]}]}',
                                    b'{"runs": [{"text": "a", "box": [0, 0, 1]}]}',
                                    b'{"runs": [{"text": "a", "box": ["0", "0", "1", "1"]}]}',
                                    b'{"runs": [{"text": 5, "box": [0, 0, 1, 1]}]}'])
def test_a_malformed_stored_layout_reads_as_no_runs(stored):
    assert read_layout(stored) == []
    assert page_views.read_page_layout(stored) == (False, [])


def test_a_stored_layouts_ocr_flag_is_true_only_when_it_says_true():
    run = b'"runs": [{"text": "a", "box": [0.5, 0.5, 0.1, 2]}]'
    assert page_views.read_page_layout(b'{"ocr": true, ' + run + b"}") == (True, [("a", [0.1, 0.5, 0.5, 1.0])])
    assert page_views.read_page_layout(b'{"ocr": "yes", ' + run + b"}")[0] is False


def test_views_are_kept_per_tenant_and_file_and_a_name_is_never_a_path(tmp_path):
    store = LocalUploadStore(tmp_path)
    store.put_view("acme", "ab" * 32, "1.jpg", b"page one")
    assert store.get_view("acme", "ab" * 32, "1.jpg") == b"page one"
    assert store.get_view("globex", "ab" * 32, "1.jpg") is None
    for tenant, sha, name in [("acme", "ab", "../1.jpg"), ("acme", "..", "1.jpg"), ("..", "ab", "1.jpg"),
                              ("acme", "ab", "a/b"), ("acme", "ab", ".hidden"), ("acme", "ab", "")]:
        with pytest.raises(ValueError):
            store.put_view(tenant, sha, name, b"x")
    assert store.stale(-1) == []  # a view is never an upload waiting to be released


def test_pages_rendered_in_the_extraction_worker_carry_their_text_boxes(corpus_dir):
    from ingestion_pipeline.core.settings import ExtractionLimits
    from ingestion_pipeline.documents.extraction.isolation import IsolatedExtractor

    with IsolatedExtractor(ExtractionLimits()) as extractor:
        views = extractor.render(corpus_dir / "documents" / "layout-parser-paper-fast.pdf", 1, 5)
    assert [v.page_number for v in views] == [1, 2]  # asked past the end: the pages there are
    first = views[0]
    assert first.image[:3] == b"\xff\xd8\xff" and len(first.image) > 20_000
    assert any("LayoutParser" in text for text, _ in first.runs)
    assert all(0 <= v <= 1 for _, box in first.runs for v in box)
    assert read_layout(first.layout()) == [(text, box) for text, box in first.runs]


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.mark.integration  # two runs of PDFs, one of them in units (~30 s)
def test_ingest_keeps_each_pages_image_and_a_citation_finds_its_passage_for_its_tenant_only(
        api, instance, database, corpus_dir, monkeypatch):
    monkeypatch.setenv("INGESTION_PAGE_IMAGES", "true")
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "4")  # fr_olap's 12 pages in units, each rendering its own pages
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")
    ingest(instance, database, "acme", corpus_dir / "documents" / "layout-parser-paper-fast.pdf",
           corpus_dir / "documents" / "fr_olap.pdf")
    docs = api.client.get("/v1/documents", headers=api.as_("acme-user")).json()["items"]
    by_name = {d["filename"]: d["doc_id"] for d in docs}
    with database.connection() as conn:
        units = conn.execute("SELECT max((stats->>'units')::int) AS n FROM ingestion_runs").fetchone()["n"]
        progress = conn.execute("SELECT stats->>'step' AS step, stats->'units_done' AS done, "
                                "stats->'units_total' AS total FROM ingestion_runs ORDER BY file_id").fetchall()
    assert units > 1  # fr_olap was read in units
    # each file's last step, and the units it was read in, as the live history showed them
    assert [row["step"] for row in progress] == ["promote", "promote"]
    assert progress[1]["done"] == progress[1]["total"] == units and progress[0]["done"] is None

    for name, pages in (("layout-parser-paper-fast.pdf", 2), ("fr_olap.pdf", 12)):
        body = api.client.get(f"/v1/documents/{by_name[name]}/chunks", headers=api.as_("acme-user")).json()
        assert body["page_images"] == body["page_count"] == pages and not body["laid_out"]
        for page in range(1, pages + 1):
            image = api.client.get(f"/v1/documents/{by_name[name]}/pages/{page}/image", headers=api.as_("acme-user"))
            assert image.status_code == 200 and image.headers["content-type"] == page_views.IMAGE_TYPE, (name, page)
        assert api.client.get(f"/v1/documents/{by_name[name]}/pages/{pages + 1}/image",
                              headers=api.as_("acme-user")).status_code == 404
        located = 0
        for chunk in body["chunks"]:
            boxes = api.client.get(f"/v1/chunks/{chunk['chunk_id']}/boxes", headers=api.as_("acme-user")).json()
            assert [p["page"] for p in boxes["pages"]] == list(range(chunk["page_start"], chunk["page_end"] + 1))
            located += any(p["boxes"] for p in boxes["pages"])
        assert located == len(body["chunks"]), name  # every chunk is found on its pages

    chunk_id = body["chunks"][0]["chunk_id"]
    doc_id = by_name["fr_olap.pdf"]
    for path in (f"/v1/documents/{doc_id}/chunks", f"/v1/documents/{doc_id}/pages/1/image",
                 f"/v1/chunks/{chunk_id}/boxes"):
        refused = api.client.get(path, headers=api.as_("globex-admin"))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", path


@needs_tesseract
@pytest.mark.integration  # two versions of a scan read by OCR (~20 s)
def test_a_scanned_pages_layout_is_ocrs_words_and_a_new_version_keeps_those_of_its_unchanged_pages(
        api, instance, database, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_PAGE_IMAGES", "true")
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "1")  # a unit a page: words kept with each unit, then assembled
    pages = [["Minutes of the harbour board", "The ferry sails twice daily from the northern quay."],
             ["Budget for the winter season", "Dredging costs rose by a third over the year."]]
    ingest(instance, database, "acme", write_scanned_pages(tmp_path / "v1.pdf", pages), key="minutes.pdf")
    revised = [pages[0], ["Budget for the winter season", "Dredging costs fell by half over the year."]]
    [doc] = api.client.get("/v1/documents", headers=api.as_("acme-user")).json()["items"]
    user = api.as_("acme-user")
    first = api.client.get(f"/v1/documents/{doc['doc_id']}/chunks", headers=user).json()
    assert first["ocr_pages"] == [1, 2] and first["page_images"] == 2
    with database.connection() as conn:
        units = conn.execute("SELECT stats->'units' AS n FROM ingestion_runs").fetchone()["n"]
    assert units == 2, units

    ingest(instance, database, "acme", write_scanned_pages(tmp_path / "v2.pdf", revised), key="minutes.pdf")
    with database.connection() as conn:
        reused = conn.execute("SELECT stats->'ocr_pages_reused' AS n FROM ingestion_runs ORDER BY file_id DESC"
                              " LIMIT 1").fetchone()["n"]
    assert reused == 1  # page 1 was not read again: its words came from the first version's
    second = api.client.get(f"/v1/documents/{doc['doc_id']}/chunks", headers=user).json()
    assert second["version_number"] == 2 and second["ocr_pages"] == [1, 2]
    for page, word in ((1, "ferry"), (2, "fell")):
        layout = api.client.get(f"/v1/documents/{doc['doc_id']}/pages/{page}/layout", headers=user).json()
        assert layout["ocr"] and layout["version_number"] == 2, layout
        assert word in [run["text"] for run in layout["runs"]], (page, layout)
        assert all(0 <= v <= 1 for run in layout["runs"] for v in run["box"])
    # a citation on a scanned page is outlined where OCR read its words
    for chunk in second["chunks"]:
        boxes = api.client.get(f"/v1/chunks/{chunk['chunk_id']}/boxes", headers=user).json()
        assert any(p["boxes"] for p in boxes["pages"]), chunk["text"]
    for path in (f"/v1/documents/{doc['doc_id']}/pages/1/layout", f"/v1/documents/{doc['doc_id']}/chunks"):
        refused = api.client.get(path, headers=api.as_("globex-admin"))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", path
    assert api.client.get(f"/v1/documents/{doc['doc_id']}/pages/3/layout", headers=user).status_code == 404


def test_a_session_cookie_signs_in_reads_and_writes_only_with_the_pages_token(api):
    who = api.services.api
    from ingestion_pipeline.core.access_tokens import verify_token

    principal = verify_token(api.tokens["acme-admin"], who.jwt_secret)
    from fastapi import Response
    from starlette.requests import Request

    response = Response()
    request = Request({"type": "http", "scheme": "http", "path": "/", "headers": []})
    web_session.open_session(response, request, who, principal)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    session = cookie.split(";")[0].split("=", 1)[1]
    api.client.cookies.set(web_session.COOKIE, session)
    try:
        assert api.client.get("/v1/documents").status_code == 200
        assert api.client.post("/v1/documents/999/deactivate").json()["error"]["code"] == "csrf_failed"
        token = web_session.csrf_token(who, session)
        assert api.client.post("/v1/documents/999/deactivate", headers={"X-CSRF-Token": token}).status_code == 404
        # a bearer token is checked as it always was: the cookie never widens what a request may do
        assert api.client.get("/v1/documents", headers={"Authorization": "Bearer nonsense"}).status_code == 401
        page = api.client.get("/app/documents")
        assert page.status_code == 200 and "acme · admin" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert f'data-csrf="{token}"' in page.text
        api.client.cookies.set(web_session.COOKIE, session[:-2] + "xx")
        assert api.client.get("/v1/documents").json()["error"]["code"] == "invalid_session"
        assert api.client.get("/app/documents", follow_redirects=False).headers["location"].startswith(
            "/app/sign-in?next=")
    finally:
        api.client.cookies.clear()


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/app/", "/v1/documents",
                                    "/app/\\evil", None])
def test_signing_in_goes_back_to_a_page_of_the_app_only(target):
    from ingestion_pipeline.api.webapp.pages import _safe_next

    assert _safe_next(target) == "/app/documents"
    assert _safe_next("/app/search?q=x") == "/app/search?q=x"


def test_the_file_events_listener_hands_each_notice_to_its_tenants_streams_only(database):
    import asyncio

    from ingestion_pipeline.api.file_events import FileEvents

    events = FileEvents(database.url)

    async def run() -> tuple[list, list]:
        acme, globex = events.subscribe("acme"), events.subscribe("globex")
        await asyncio.get_running_loop().run_in_executor(None, events.listening.wait, 10)
        await asyncio.sleep(0.3)  # the resync every stream gets when the listener connects, handed over by now
        while not acme.empty():
            assert acme.get_nowait() is None
        while not globex.empty():
            globex.get_nowait()
        with database.connection() as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme') ON CONFLICT DO NOTHING")
            conn.execute("SELECT pg_notify('file_events', %s)", (json.dumps({"tenant_id": "acme", "file_id": 7}),))
            conn.execute("SELECT pg_notify('file_events', 'not json')")
            conn.execute("SELECT pg_notify('file_events', %s)", (json.dumps({"tenant_id": "acme", "file_id": "7"}),))
        got = await asyncio.wait_for(acme.get(), 10)
        await asyncio.sleep(0.5)
        return [got, *[acme.get_nowait() for _ in range(acme.qsize())]], \
            [globex.get_nowait() for _ in range(globex.qsize())]

    try:
        acme_got, globex_got = asyncio.run(run())
    finally:
        events.close()
    assert acme_got == [7] and globex_got == []


def test_a_files_move_is_notified_at_commit_with_its_tenant(database, api):
    import psycopg

    with psycopg.connect(database.url, autocommit=True) as listener:
        listener.execute("LISTEN file_events")
        r = api.client.post("/v1/ingest", headers=api.as_("acme-user"),
                            files={"file": ("w.txt", b"words " * 50, "text/plain")})
        assert r.status_code == 202
        notices = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert notices == [{"tenant_id": "acme", "file_id": r.json()["file_id"]}]


def test_an_admin_replays_a_failed_file_of_its_own_tenant_only(api, database):
    r = api.client.post("/v1/ingest", headers=api.as_("acme-user"),
                        files={"file": ("w.txt", b"words " * 50, "text/plain")})
    file_id = r.json()["file_id"]
    with database.connection() as conn:
        conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'broken', finished_at = now() "
                     "WHERE file_id = %s", (file_id,))
    assert api.client.post(f"/v1/files/{file_id}/retry", headers=api.as_("acme-user")).status_code == 403
    assert api.client.post(f"/v1/files/{file_id}/retry", headers=api.as_("globex-admin")).status_code == 404
    replayed = api.client.post(f"/v1/files/{file_id}/retry", headers=api.as_("acme-admin"))
    assert replayed.status_code == 200 and replayed.json()["status"] == "queued"
    assert replayed.json()["error"] is None
    again = api.client.post(f"/v1/files/{file_id}/retry", headers=api.as_("acme-admin"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_replayable"


def test_a_page_that_encodes_large_is_kept_within_the_byte_bound(tmp_path):
    import numpy as np
    from PIL import Image

    noise = Image.fromarray(np.random.default_rng(7).integers(0, 256, (1100, 850, 3), dtype=np.uint8))
    path = tmp_path / "noise.pdf"
    noise.save(path, "PDF", resolution=100)
    [view] = page_views.render_pages(path, 1, 1)
    assert view.image[:3] == b"\xff\xd8\xff" and len(view.image) + len(view.layout()) <= page_views.MAX_PAGE_BYTES
