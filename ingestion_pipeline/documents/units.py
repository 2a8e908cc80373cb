"""Units of a big document: page ranges read side by side, kept one by one, assembled once.

A PDF of more than ``INGESTION_UNIT_PAGES`` pages is split, after a cheap look at its page count, into
ranges of about that many pages. Each unit is read by its own extraction worker (the step's lanes), and its
result is written to ``staging_units`` the moment it is read: a retried or re-executed step — a worker
SIGKILLed mid-document included — reads only the units not done yet. The file's elements are assembled from
the units once all of them are done, counted as distinct done rows, never by a counter; PDF paragraphs never
cross a page, so the assembled document is the one the whole file gives (``extraction.assemble_pdf``), and
chunking, which reads the assembled elements, cuts no differently at a unit's edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.documents.extraction.elements import Element, PdfPages, ReadPage


@dataclass(frozen=True)
class Unit:
    number: int  # 0-based, in page order
    first_page: int
    last_page: int

    @property
    def pages(self) -> str:
        return f"pages {self.first_page}-{self.last_page}"


def plan_units(page_count: int, unit_pages: int) -> list[Unit]:
    """Page ranges of about ``unit_pages`` pages covering ``page_count`` pages once, in order; one unit when the
    document is not bigger than that. The ranges are even (60 pages in units of 25 are 20 + 20 + 20, not
    25 + 25 + 10), so no worker waits on one long unit at the end."""
    if page_count < 1 or unit_pages < 1:
        raise ValueError(f"cannot plan units of {unit_pages} page(s) for {page_count} page(s)")
    count = math.ceil(page_count / unit_pages)
    base, extra = divmod(page_count, count)
    units, first = [], 1
    for number in range(count):
        size = base + (1 if number < extra else 0)
        units.append(Unit(number, first, first + size - 1))
        first += size
    return units


# -- a unit's result, as kept in staging_units.result ------------------------------------------------------------

def to_json(pages: PdfPages) -> dict:
    return {
        "elements": [[e.type, e.text, e.page_number, e.level] for e in pages.elements],
        "read_pages": [[p.page_number, p.image_sha256, p.engine, p.text, p.source_sha256, p.reused]
                       for p in pages.read_pages],
        "unread": pages.unread,
        "copy_protected": pages.copy_protected,
    }


def from_json(unit: dict) -> PdfPages:
    result = unit["result"]
    return PdfPages(
        unit["first_page"], unit["last_page"],
        [Element(kind, text, page, level=level) for kind, text, page, level in result["elements"]],
        [ReadPage(page, image, engine, text, source, reused)
         for page, image, engine, text, source, reused in result["read_pages"]],
        list(result["unread"]), bool(result["copy_protected"]),
    )


# -- staging_units ---------------------------------------------------------------------------------------------

def plan(conn: psycopg.Connection, run_id: int, content_hash: str, units: list[Unit]) -> None:
    """Record the file's units; units already recorded for the same bytes and pages are kept (done ones are
    reused), others (a file replanned under another unit size) are dropped first."""
    conn.execute(
        """DELETE FROM staging_units s WHERE run_id = %s AND NOT EXISTS (
               SELECT 1 FROM unnest(%s::int[], %s::int[], %s::int[]) AS u(n, f, l)
                WHERE u.n = s.unit_number AND u.f = s.first_page AND u.l = s.last_page AND s.content_hash = %s)""",
        (run_id, [u.number for u in units], [u.first_page for u in units], [u.last_page for u in units],
         content_hash))
    conn.execute("UPDATE staging_units SET reused = true WHERE run_id = %s AND state = 'done'", (run_id,))
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO staging_units (run_id, unit_number, first_page, last_page, content_hash)
               VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, unit_number) DO NOTHING""",
            [(run_id, u.number, u.first_page, u.last_page, content_hash) for u in units])


def pending(conn: psycopg.Connection, run_id: int) -> list[Unit]:
    rows = conn.execute(
        """SELECT unit_number, first_page, last_page FROM staging_units
            WHERE run_id = %s AND state = 'pending' ORDER BY unit_number""", (run_id,)).fetchall()
    return [Unit(r["unit_number"], r["first_page"], r["last_page"]) for r in rows]


def finish(conn: psycopg.Connection, run_id: int, unit: Unit, pages: PdfPages, *, done_by: str,
           extract_ms: int) -> bool:
    """Keep a unit's result; False when it was done already (a second delivery: nothing is written)."""
    row = conn.execute(
        """UPDATE staging_units SET state = 'done', result = %s, done_by = %s, done_at = now(), extract_ms = %s
            WHERE run_id = %s AND unit_number = %s AND state = 'pending' RETURNING unit_number""",
        (Jsonb(to_json(pages)), done_by, extract_ms, run_id, unit.number)).fetchone()
    return row is not None


def done(conn: psycopg.Connection, run_id: int) -> tuple[int, list[PdfPages], dict]:
    """How many units the file has, the done ones' results in page order, and their figures (units reused from
    an earlier attempt, the milliseconds the done units took to read)."""
    planned = conn.execute("SELECT count(*) AS n FROM staging_units WHERE run_id = %s", (run_id,)).fetchone()["n"]
    rows = conn.execute(
        """SELECT DISTINCT ON (unit_number) unit_number, first_page, last_page, result, reused, extract_ms
             FROM staging_units WHERE run_id = %s AND state = 'done' ORDER BY unit_number""", (run_id,)).fetchall()
    # the makespan of this attempt's units: the first planned to the last kept (the units read side by side)
    wall = conn.execute(
        """SELECT coalesce(extract(epoch FROM max(done_at) - min(planned_at)) * 1000, 0)::int AS ms
             FROM staging_units WHERE run_id = %s AND state = 'done' AND NOT reused""", (run_id,)).fetchone()["ms"]
    figures = {"units_reused": sum(r["reused"] for r in rows),
               "units_extract_ms": sum(r["extract_ms"] or 0 for r in rows), "units_wall_ms": wall}
    return planned, [from_json(r) for r in rows], figures


def progress(conn: psycopg.Connection, run_id: int) -> dict | None:
    """A file's units as they are read (None for a file not read in units): units and pages done of all, pages
    read per second by this attempt's units, and the ETA at that rate."""
    row = conn.execute(
        """SELECT count(*) AS units_total, count(*) FILTER (WHERE state = 'done') AS units_done,
                  coalesce(sum(last_page - first_page + 1), 0) AS pages_total,
                  coalesce(sum(last_page - first_page + 1) FILTER (WHERE state = 'done'), 0) AS pages_done,
                  coalesce(sum(last_page - first_page + 1) FILTER (WHERE state = 'done' AND NOT reused), 0)
                      AS pages_read,
                  extract(epoch FROM max(done_at) FILTER (WHERE NOT reused)
                                     - min(planned_at) FILTER (WHERE NOT reused)) AS seconds
             FROM staging_units WHERE run_id = %s""", (run_id,)).fetchone()
    if not row["units_total"]:
        return None
    seconds = float(row["seconds"] or 0)
    rate = row["pages_read"] / seconds if seconds > 0 else None
    left = row["pages_total"] - row["pages_done"]
    return {"units_done": row["units_done"], "units_total": row["units_total"], "pages_done": row["pages_done"],
            "pages_total": row["pages_total"], "pages_per_s": None if rate is None else round(rate, 2),
            "eta_s": 0.0 if left == 0 else (None if rate is None else round(left / rate, 1))}
