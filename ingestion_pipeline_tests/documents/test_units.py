"""Units of a big PDF: page ranges that cover it once, read separately and assembled into exactly the document
the whole file gives; their markers in staging_units take a second delivery without writing twice."""

from pathlib import Path

import pypdfium2 as pdfium
import pytest

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents import staging, units
from ingestion_pipeline.documents.extraction import assemble_pdf, extract, extract_pdf_pages, ocr, pdf_survey
from ingestion_pipeline.documents.extraction.elements import Element, PdfPages, PdfSurvey
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.extraction.isolation import ExtractorPool
from ingestion_pipeline_tests.helpers import submit, table


def test_units_cover_every_page_once_in_even_ranges():
    assert units.plan_units(10, 12) == [units.Unit(0, 1, 10)]
    assert [(u.first_page, u.last_page) for u in units.plan_units(60, 25)] == [(1, 20), (21, 40), (41, 60)]
    plan = units.plan_units(619, 12)
    assert len(plan) == 52 and plan[0].first_page == 1 and plan[-1].last_page == 619
    assert all(a.last_page + 1 == b.first_page for a, b in zip(plan, plan[1:], strict=False))
    assert {u.last_page - u.first_page + 1 for u in plan} <= {11, 12}
    with pytest.raises(ValueError):
        units.plan_units(0, 12)


def test_units_hold_even_work_where_ocr_is_the_work():
    # a 619-page text PDF (1.5 s to read) is one unit; the same pages scanned are 78 units of ~8 pages
    assert units.plan_units(619, 8, scanned=[], text_pages=100) == [units.Unit(0, 1, 619)]
    assert len(units.plan_units(619, 8, scanned=range(1, 620), text_pages=100)) == 78
    # 50 text pages then 50 scanned ones: the text pages ride with the first scanned pages
    mixed = units.plan_units(100, 8, scanned=range(51, 101), text_pages=100)
    assert [(u.first_page, u.last_page) for u in mixed] == [(1, 57), (58, 64), (65, 72), (73, 79), (80, 86),
                                                            (87, 93), (94, 100)]
    # a scan of 100,000 pages: units grow rather than become 12,500 steps
    huge = units.plan_units(100_000, 8)
    assert len(huge) == units.MAX_UNITS and huge[-1].last_page == 100_000
    assert {u.last_page - u.first_page + 1 for u in huge} == {200}
    # every page is a unit before any is empty
    assert [(u.first_page, u.last_page) for u in units.plan_units(3, 1, scanned=[3], text_pages=1)] == [
        (1, 1), (2, 2), (3, 3)]


def test_the_survey_finds_the_pages_without_text(corpus_dir, tmp_path):
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages

    assert pdf_survey(corpus_dir / "documents" / "DA-619p.pdf", 8) == PdfSurvey(619, [])
    assert pdf_survey(corpus_dir / "documents" / "DA-619p.pdf", 1000) == PdfSurvey(619, None)
    lines = [[f"Minutes of meeting {n}"] for n in range(1, 4)]
    scan = write_scanned_pages(tmp_path / "scan.pdf", lines)
    assert pdf_survey(scan) == PdfSurvey(3, [1, 2, 3])
    # its revision with page 2 changed: the unchanged pages' text is reused, so only page 2 is work
    revised = write_scanned_pages(tmp_path / "revised.pdf", [lines[0], ["Minutes, amended"], lines[2]])
    pdf = pdfium.PdfDocument(str(scan))
    known = [ocr.source_digest(pdf[i]) for i in range(3)]
    pdf.close()
    assert pdf_survey(revised, 0, known) == PdfSurvey(3, [2], known=2)
    # the pages it counts as work are those extraction finds without a text layer, less the blank ones: page 2
    # draws nothing; page 3 only an annotation ("This page is intentionally left blank"), read by OCR
    path = corpus_dir / "documents" / "layout-parser-paper-with-empty-pages.pdf"
    whole = extract_pdf_pages(path, 1, pdf_survey(path).page_count)
    assert pdf_survey(path).scanned == sorted([p.page_number for p in whole.read_pages] + whole.unread) == [3]
    assert (pdf_survey(path).blank, whole.blank) == (1, [2])


def _in_units(path: Path, unit_pages: int):
    pages = pdf_survey(path).page_count
    parts = [units.from_json({"first_page": u.first_page, "last_page": u.last_page,
                              "result": units.to_json(extract_pdf_pages(path, u.first_page, u.last_page))})
             for u in units.plan_units(pages, unit_pages)]
    return parts, pages


@pytest.mark.parametrize(("name", "unit_pages"), [
    ("DA-619p.pdf", 12),  # 52 units, an outline of bookmarks, sections crossing units
    ("fr_olap.pdf", 3),
    ("layout-parser-paper-with-empty-pages.pdf", 1),  # empty pages: the notes name them once
])
def test_a_pdf_read_in_units_is_the_document_the_whole_file_gives(corpus_dir, name, unit_pages):
    path = corpus_dir / "documents" / name
    whole = extract(path, ".pdf")
    parts, pages = _in_units(path, unit_pages)
    assembled = assemble_pdf(list(reversed(parts)), pages)  # in any order: assembled by their pages
    assert assembled.elements == whole.elements  # text, kind, page and section path of every element, in order
    assert assembled.notes == whole.notes and assembled.page_count == whole.page_count


def test_units_that_miss_or_repeat_a_page_are_refused(corpus_dir):
    path = corpus_dir / "documents" / "fr_olap.pdf"
    parts, pages = _in_units(path, 3)
    with pytest.raises(ValueError, match="page 4 expected"):
        assemble_pdf([parts[0], *parts[2:]], pages)
    with pytest.raises(ValueError, match="end at page 9 of 12"):
        assemble_pdf(parts[:-1], pages)
    with pytest.raises(ExtractionError, match="not in this 12-page PDF"):
        extract_pdf_pages(path, 10, 13)


def test_the_text_limit_holds_for_the_assembled_document(corpus_dir):
    path = corpus_dir / "documents" / "fr_olap.pdf"
    parts, pages = _in_units(path, 3)
    with pytest.raises(ExtractionError) as error:
        assemble_pdf(parts, pages, ExtractionLimits(max_text_chars=1000))
    assert error.value.code == "file_too_much_text"


def test_the_pool_reads_units_in_separate_workers_side_by_side(corpus_dir):
    import threading

    path = corpus_dir / "documents" / "fr_olap.pdf"
    with ExtractorPool(ExtractionLimits(), 2) as pool:
        assert pool.survey(path, 12) == PdfSurvey(12, None)  # 12 pages: not looked at beyond the count
        results, barrier = {}, threading.Barrier(2)

        def read(first, last):
            barrier.wait()
            results[first] = pool(path, ".pdf", (), (first, last))

        threads = [threading.Thread(target=read, args=r) for r in ((1, 6), (7, 12))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert pool._made == 2  # two workers: the second unit did not wait for the first
        assembled = assemble_pdf(list(results.values()), 12)
    assert assembled.elements == extract(path, ".pdf").elements


def test_a_unit_delivered_twice_is_written_once(database, db, corpus_dir):
    submit(database, "acme", corpus_dir / "documents" / "fr_olap.pdf")
    [row] = table(db, "SELECT file_id FROM ingestion_runs")
    with database.transaction() as conn:
        staging.ensure_staging_row(conn, row["file_id"], "acme")
        plan = units.plan_units(6, 3)
        units.plan(conn, row["file_id"], "sha-a", plan)
    first = PdfPages(1, 3, [Element("NarrativeText", "first delivery", 1)])
    second = PdfPages(1, 3, [Element("NarrativeText", "second delivery", 1)])
    with database.transaction() as conn:
        assert units.finish(conn, row["file_id"], plan[0], first, done_by="host-a:1", extract_ms=5)
        assert not units.finish(conn, row["file_id"], plan[0], second, done_by="host-b:2", extract_ms=5)
        assert [u.number for u in units.pending(conn, row["file_id"])] == [1]
        planned, parts, figures = units.done(conn, row["file_id"])
    assert planned == 2 and [p.elements[0].text for p in parts] == ["first delivery"]
    with database.connection() as conn:
        shown = units.progress(conn, row["file_id"])
    assert {k: shown[k] for k in ("units_done", "units_total", "pages_done", "pages_total")} == {
        "units_done": 1, "units_total": 2, "pages_done": 3, "pages_total": 6}
    assert (figures["units_reused"], figures["units_extract_ms"]) == (0, 5) and figures["units_wall_ms"] >= 0
    with database.transaction() as conn:  # the same plan again (a retry) keeps the done unit
        units.plan(conn, row["file_id"], "sha-a", plan)
        assert [u.number for u in units.pending(conn, row["file_id"])] == [1]
        assert units.done(conn, row["file_id"])[2]["units_reused"] == 1
        units.plan(conn, row["file_id"], "sha-b", plan)  # other bytes: nothing is reused
        assert [u.number for u in units.pending(conn, row["file_id"])] == [0, 1]
    rows = table(db, "SELECT unit_number, state, done_by FROM staging_units WHERE file_id = %s ORDER BY 1",
                 row["file_id"])
    assert rows == [{"unit_number": 0, "state": "pending", "done_by": None},
                    {"unit_number": 1, "state": "pending", "done_by": None}]


def test_chunks_to_encode_are_cut_into_shares_of_the_set_size():
    from ingestion_pipeline.documents.steps.embed import cut_into_shares

    runs = [(7, 0, 4), (7, 9, 12), (8, 0, 2)]  # file 7: chunks 0-4 and 9-12 (5-8 reused), file 8: 0-2
    assert cut_into_shares(runs, 4) == [[[7, 0, 3]], [[7, 4, 4], [7, 9, 11]], [[7, 12, 12], [8, 0, 2]]]
    assert cut_into_shares(runs, 100) == [[[7, 0, 4], [7, 9, 12], [8, 0, 2]]]
    assert cut_into_shares([], 4) == []


def _backdate(db, file_id: int, seconds: float) -> None:
    db.execute("UPDATE staging_units SET heartbeat_at = now() - make_interval(secs => %s) WHERE file_id = %s",
               (seconds, file_id))


def test_a_unit_is_leased_to_one_reader_and_handed_on_when_its_lease_goes_stale(database, db, corpus_dir):
    submit(database, "acme", corpus_dir / "documents" / "fr_olap.pdf")
    [row] = table(db, "SELECT file_id FROM ingestion_runs")
    file_id = row["file_id"]
    plan = units.plan_units(6, 3)
    with database.transaction() as conn:
        staging.ensure_staging_row(conn, file_id, "acme")
        units.plan(conn, file_id, "sha-a", plan)
        assert units.take(conn, file_id, 0, "host-a:1") == "taken"
        assert units.take(conn, file_id, 0, "host-a:1") == "taken"  # its own lease again (a retry in place)
        assert units.take(conn, file_id, 0, "host-b:2") == "busy"  # a second delivery while host-a renews it
        assert units.beat(conn, file_id, 0, "host-a:1") and not units.beat(conn, file_id, 0, "host-b:2")
    with database.connection() as conn:
        [reading] = units.progress(conn, file_id)["reading"]
    assert (reading["unit"], reading["reader"], reading["first_page"]) == (0, "host-a:1", 1)
    assert reading["beat_seconds_ago"] < units.STALE_SECONDS
    _backdate(db, file_id, units.STALE_SECONDS + 1)  # host-a died: no beat for longer than a lease
    with database.transaction() as conn:
        assert units.take(conn, file_id, 0, "host-b:2") == "taken"  # handed on by the next reader
        assert not units.beat(conn, file_id, 0, "host-a:1")  # host-a, back, learns it has lost the unit
        assert units.take(conn, file_id, 1, "host-a:1") == "taken"
        units.release(conn, file_id, 1, "host-a:1")  # its read failed: free at once
        assert units.take(conn, file_id, 1, "host-c:3") == "taken"
        assert units.finish(conn, file_id, plan[0], PdfPages(1, 3, []), done_by="host-b:2", extract_ms=1)
        assert units.take(conn, file_id, 0, "host-c:3") == "done"
    # the janitor hands back units whose reader went silent, and only those
    _backdate(db, file_id, units.STALE_SECONDS + 1)
    with database.transaction() as conn:
        stale = units.hand_back_stale(conn)
        assert [(u["unit_number"], u["leased_by"]) for u in stale] == [(1, "host-c:3")]
        assert units.hand_back_stale(conn) == []
    rows = table(db, "SELECT unit_number, state, leased_by FROM staging_units WHERE file_id = %s ORDER BY 1", file_id)
    assert rows == [{"unit_number": 0, "state": "done", "leased_by": None},
                    {"unit_number": 1, "state": "pending", "leased_by": None}]


def test_the_janitor_reports_the_units_it_handed_back(database, db, corpus_dir):
    import dagster as dg

    from ingestion_pipeline.core.settings import ReliabilitySettings
    from ingestion_pipeline.runtime.janitor import run_janitor

    submit(database, "acme", corpus_dir / "documents" / "fr_olap.pdf")
    [row] = table(db, "SELECT file_id FROM ingestion_runs")
    with database.transaction() as conn:
        staging.ensure_staging_row(conn, row["file_id"], "acme")
        units.plan(conn, row["file_id"], "sha-a", units.plan_units(6, 3))
        units.take(conn, row["file_id"], 1, "host-a:1")
    _backdate(db, row["file_id"], units.STALE_SECONDS + 1)
    with dg.instance_for_test() as instance:
        report = run_janitor(instance, database, ReliabilitySettings())
    assert f"1 unit(s) whose reader stopped renewing its lease handed back: file {row['file_id']} pages 4-6" \
        in report.describe()


def test_a_process_that_executes_step_after_step_keeps_its_extraction_workers(corpus_dir, monkeypatch):
    """A Celery worker's steps (a big PDF's units among them) reuse the process's extraction workers: a step's
    pipeline closed leaves them running for the next step."""
    from ingestion_pipeline.runtime import kept_across_steps as resources

    path = corpus_dir / "documents" / "fr_olap.pdf"
    limits = ExtractionLimits()
    separate = resources.step_extractors(limits, 1)
    assert separate is not resources.step_extractors(limits, 1)  # by default a step's workers are its own
    separate.close()
    monkeypatch.setattr(resources, "_keep", True)
    resources._extractors.cache_clear()
    first = resources.step_extractors(limits, 1)
    try:
        first.survey(path)
        [worker] = first._idle
        pid = worker._process.pid
        first.close()  # the step is over
        second = resources.step_extractors(limits, 1)
        assert second is first and second.survey(path).page_count == 12
        assert second._idle[0]._process.pid == pid and second._idle[0]._process.poll() is None
    finally:
        ExtractorPool.close(first)
        resources._extractors.cache_clear()
