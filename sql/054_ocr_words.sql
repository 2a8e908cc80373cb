-- The words OCR read on each scanned page, with their boxes: a JSON array of [text, [x0, y0, x1, y1]], the box in
-- fractions of the page from its top left corner (documents/extraction/ocr.py). They are where the web app outlines
-- a passage on a scanned page, and travel with the page's text: staged, kept with the version, reused by the next
-- version for an unchanged page. NULL: read before words were kept.
ALTER TABLE staging_ocr_pages ADD COLUMN words jsonb;
ALTER TABLE version_ocr_pages ADD COLUMN words jsonb;
