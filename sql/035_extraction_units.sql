-- A big PDF is read in units (page ranges, documents/units.py), side by side; each unit's result is kept here
-- the moment it is read, so a retried or re-executed step reads only the units not done yet. One row per unit
-- of a file (the ledger row it becomes a version of): UNIQUE (run_id, unit_number) makes a second delivery of
-- a unit write nothing new, and the file is complete when the count of distinct done units is the number
-- planned (never a counter).
CREATE TABLE staging_units (
    run_id        bigint NOT NULL REFERENCES staging_documents (run_id) ON DELETE CASCADE,
    unit_number   integer NOT NULL,
    first_page    integer NOT NULL,
    last_page     integer NOT NULL,
    -- the file's SHA-256 and the unit's pages: a unit planned for other bytes or another size is not reused
    content_hash  text NOT NULL,
    state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    result        jsonb,
    planned_at    timestamptz NOT NULL DEFAULT now(),
    done_by       text,
    done_at       timestamptz,
    extract_ms    integer,
    reused        boolean NOT NULL DEFAULT false,  -- done by an earlier attempt when the file was planned again
    PRIMARY KEY (run_id, unit_number),
    CHECK (first_page <= last_page)
);

-- Promotion claims the file's version once: UPDATE ... WHERE finalize_claimed_at IS NULL RETURNING, inside the
-- promoting transaction (documents/promotion.py). A second promoter of the same staged file gets no row.
ALTER TABLE staging_documents ADD COLUMN finalize_claimed_at timestamptz;
