"""Slides, spreadsheets, mail and e-books (read through unstructured, offline) through the real assets:
each file's own sentence is found by search with the right citation; a damaged file of each format
fails alone with its reason."""

import dagster as dg
import pytest

from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.samples.office_documents import write_office_samples
from ingestion_pipeline_tests.helpers import ingest, pipeline_for, table

FORMATS = (".pptx", ".xlsx", ".eml", ".msg", ".epub", ".odt", ".rtf")
DAMAGED_REASONS = {
    ".pptx": "PowerPoint file is damaged or is not one: it is not a zip package",
    ".xlsx": "Excel file is damaged or is not one: it is not a zip package",
    ".eml": "e-mail file is damaged or is not one: it has no From, To, Subject or Date header",
    ".msg": "Outlook message file could not be read: the file is not an Outlook MSG file",
    ".epub": "EPUB file is damaged or is not one: it is not a zip package",
    ".odt": "OpenDocument text file is damaged or is not one: it is not a zip package",
    ".rtf": "RTF file is damaged or is not one: it does not start with {\\rtf",
}


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def test_every_format_is_allowed_for_uploads_and_s3():
    assert set(FORMATS) <= set(DOCUMENT_TYPES)


@pytest.mark.integration
def test_each_format_is_found_by_search_with_its_citation(instance, database, db, tmp_path):
    samples = write_office_samples(tmp_path / "office", large_sheet_rows=400)
    ingest(instance, database, "acme", *(s.path for s in samples.values()))
    runs = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert {r["status"] for r in runs.values()} == {"succeeded"}, {n: r["error"] for n, r in runs.items()}

    embedder = pipeline_for(database).embedder
    for extension, sample in samples.items():
        vector = embedder.embed([sample.query])[0]
        hits = hybrid_search(db, tenant_id="acme", query=sample.query, query_vector=vector, k=3,
                             model=embedder.info.name)
        assert hits, extension
        top = hits[0]
        assert sample.text in top.text and top.filename == sample.path.name, (extension, top)
        assert sample.section in top.citation(), (extension, top.citation())
        if sample.page is not None:
            assert top.page_start == sample.page, (extension, top)

    # a sheet too long for one chunk is split by rows, each part under its header row, in its sheet's section
    xlsx = runs["lighthouse-budget.xlsx"]["stats"]["version_id"]
    parts = table(db, "SELECT text, section_path FROM chunks WHERE version_id = %s AND %s = ANY(section_path) "
                      "ORDER BY ordinal", xlsx, "Tide log")
    assert len(parts) > 3
    texts = [p["text"].removeprefix("Tide log\n") for p in parts]  # the sheet's title travels with its first part
    assert all(t.startswith("Day | High water | Low water | Observer\n") for t in texts)
    days = [line.split(" | ")[0] for t in texts for line in t.split("\n")[1:]]
    assert days == [f"Day {d}" for d in range(1, 401)]


@pytest.mark.integration
def test_a_damaged_file_of_each_format_fails_alone_with_its_reason(instance, database, db, tmp_path):
    good = write_office_samples(tmp_path / "good")[".eml"].path
    damaged = []
    for extension in FORMATS:
        path = tmp_path / f"damaged{extension}"
        path.write_bytes(extension.encode() + bytes(range(256)) * 8)  # binary noise under the format's name
        damaged.append(path)
    ingest(instance, database, "acme", good, *damaged)
    runs = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert runs[good.name]["status"] == "succeeded"
    for extension, reason in DAMAGED_REASONS.items():
        run = runs[f"damaged{extension}"]
        assert run["status"] == "failed" and run["error"].startswith(reason), (extension, run["error"])
        assert run["error_code"] == f"{extension.lstrip('.')}_unreadable"
    assert len(table(db, "SELECT * FROM document_versions")) == 1


def test_a_file_with_no_text_says_so(tmp_path):
    import openpyxl

    path = tmp_path / "empty.xlsx"
    openpyxl.Workbook().save(path)
    with pytest.raises(Exception, match="Excel file contains no text"):
        extract(path, ".xlsx")


def test_a_missing_piece_is_a_clear_error_never_an_empty_result(tmp_path, monkeypatch):
    import spacy.util

    from ingestion_pipeline.documents.extraction.errors import ExtractionError

    sample = write_office_samples(tmp_path)[".pptx"]
    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)  # as if the model were not installed
    with pytest.raises(ExtractionError, match="the spaCy model en_core_web_sm is not installed") as failure:
        extract(sample.path, ".pptx")
    assert failure.value.code == "format_support_missing"
    assert "pip install ./packaging/en_core_web_sm" in str(failure.value)
