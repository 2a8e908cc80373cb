-- The text OCR read on each scanned page, keyed by the SHA-256 of the page's rendered image and the engine
-- that read it (and, for a page of images only, of its images' encoded data: found without rendering). Staged with the file's elements, kept with the version it was promoted into: a new version of
-- the document reuses the text of every page whose image is unchanged instead of reading it again
-- (documents/extraction/ocr.py), and a re-index carries them into the version it makes.
CREATE TABLE staging_ocr_pages (
    run_id        bigint NOT NULL REFERENCES staging_documents (run_id) ON DELETE CASCADE,
    page_number   integer NOT NULL,
    image_sha256  text NOT NULL,
    engine        text NOT NULL,
    source_sha256 text,
    text          text NOT NULL,
    reused        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, page_number)
);

CREATE TABLE version_ocr_pages (
    version_id    bigint NOT NULL REFERENCES document_versions (version_id),
    tenant_id     text NOT NULL,
    page_number   integer NOT NULL,
    image_sha256  text NOT NULL,
    engine        text NOT NULL,
    source_sha256 text,
    text          text NOT NULL,
    PRIMARY KEY (version_id, page_number)
);
