-- On Celery workers a big document's sections are chunked in parts, one step each on any worker
-- (documents/steps/chunk_parts.py); each part's chunks are kept here the moment they are made, so a retried or
-- re-executed step chunks only the parts not done yet. One row per part of a file: PRIMARY KEY (run_id,
-- part_number) makes a second delivery of a part replace its own row and add nothing; the file's chunks are
-- assembled once every planned part is done (counted as distinct done rows, never by a counter). A part's
-- chunks are numbered, given their context line and language at the assembly.
CREATE TABLE staging_chunk_parts (
    run_id        bigint NOT NULL REFERENCES staging_documents (run_id) ON DELETE CASCADE,
    part_number   integer NOT NULL,
    -- the keys of the part's sections, in order (a part planned for other sections is chunked again), and where
    -- each begins and ends among the file's staged elements (start, end, start, end, ...): the part reads its own
    section_keys  text[] NOT NULL,
    section_bounds integer[] NOT NULL,
    state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    chunks        jsonb,
    planned_at    timestamptz NOT NULL DEFAULT now(),
    done_by       text,
    done_at       timestamptz,
    chunk_ms      integer,
    PRIMARY KEY (run_id, part_number),
    CHECK (cardinality(section_bounds) = 2 * cardinality(section_keys))
);
