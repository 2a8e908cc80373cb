-- Each chunk's language, as the text-search configuration its tsvector is built with (documents/languages.py:
-- 'english', 'french', … 'simple' where Postgres has none), and each version's set of them, which a search
-- parses the query in. Versions promoted before languages were detected were indexed in English.
ALTER TABLE staging_chunks ADD COLUMN text_search_config text NOT NULL DEFAULT 'english';
ALTER TABLE chunks ADD COLUMN text_search_config text NOT NULL DEFAULT 'english';
ALTER TABLE document_versions ADD COLUMN text_search_configs text[] NOT NULL DEFAULT '{english}';
-- What is embedded with a chunk's text: its document's title and nearest headings (documents/chunking.py).
ALTER TABLE staging_chunks ADD COLUMN embedding_context text NOT NULL DEFAULT '';
-- chunk_fts carries its chunk's configuration too: a query word parsed in one language matches, and is
-- counted among, the chunks indexed in that language only (documents/search.py), without a join.
ALTER TABLE chunk_fts ADD COLUMN text_search_config text NOT NULL DEFAULT 'english';
