-- The section of a big document each chunk was made in (documents/sections.py): a key over the section's
-- elements and the chunking recipe. A new version of the document takes the chunks of every section whose key its
-- served version has instead of chunking that text again, found through UNIQUE (version_id, ordinal). NULL for a
-- document chunked whole (most files: up to INGESTION_UNIT_CHARACTERS of text) and for the rows of earlier
-- releases, which are then simply chunked again. Adding a column without a default rewrites no row.
ALTER TABLE staging_chunks ADD COLUMN section_key text;
ALTER TABLE chunks ADD COLUMN section_key text;
