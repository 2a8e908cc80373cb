"""Units of a big document: page ranges read side by side, kept one by one, assembled once.

A PDF of more than ``INGESTION_UNIT_PAGES`` pages' work is split, after a cheap look at its pages (how many, and
which have no text layer and need OCR), into ranges of about that much work. Each unit is read by its own
extraction worker (the step's lanes; on Celery, a step on any worker) under a lease it renews, and its result is
written to ``staging_units`` the moment it is read: a retried or re-executed step — a worker SIGKILLed
mid-document included — reads only the units not done yet. The file's elements are assembled from the units once
all of them are done, counted as distinct done rows, never by a counter; PDF paragraphs never cross a page, so
the assembled document is the one the whole file gives (``extraction.assemble_pdf``), and chunking, which reads
the assembled elements, cuts no differently at a unit's edge.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.beats import Beat
from ingestion_pipeline.documents.extraction.elements import Element, PdfPages, ReadPage, ocr_words

_log = logging.getLogger("ingestion_pipeline.documents")


@dataclass(frozen=True)
class Unit:
    number: int  # 0-based, in page order
    first_page: int
    last_page: int

    @property
    def pages(self) -> str:
        return f"pages {self.first_page}-{self.last_page}"


# A unit is a step of its own under Celery (Dagster and Celery cost each step: benchmarks/multi_host.py): a
# 100,000-page scan in units of 8 pages would be 12,500 steps. Past this many, units grow instead.
MAX_UNITS = 500


def plan_units(page_count: int, unit_pages: int, scanned: Sequence[int] | None = None,
               text_pages: int = 1) -> list[Unit]:
    """Page ranges of about ``unit_pages`` pages' work covering ``page_count`` pages once, in order; one unit when
    the document is not more work than that.

    Work is OCR: a page in ``scanned`` (no text layer) counts 1, any other page ``1 / text_pages`` (reading a
    text page costs a small fraction of an OCR'd one: benchmarks/big_documents.py). ``scanned=None`` counts every
    page 1. A long text PDF, read in seconds, is not split into dozens of units that each cost a worker's round
    trip, while a scan of as many pages is. The
    ranges hold even work (60 scanned pages in units of 25 are 20 + 20 + 20, not 25 + 25 + 10), so no worker waits
    on one long unit at the end; at most ``MAX_UNITS`` of them."""
    if page_count < 1 or unit_pages < 1 or text_pages < 1:
        raise ValueError(f"cannot plan units of {unit_pages} page(s) for {page_count} page(s)")
    if scanned is None:
        weights = [1.0] * page_count
    else:
        heavy = set(scanned)
        weights = [1.0 if page in heavy else 1.0 / text_pages for page in range(1, page_count + 1)]
    total = sum(weights)
    count = min(page_count, MAX_UNITS, max(1, math.ceil(total / unit_pages - 1e-9)))
    units: list[Unit] = []
    first, running = 1, 0.0
    for page, weight in enumerate(weights, start=1):
        running += weight
        cuts_left = count - 1 - len(units)
        # cut where the running work passes the next k/count of the whole (or where each page left must be a unit)
        if cuts_left and (running >= total * (len(units) + 1) / count - 1e-9 or page_count - page == cuts_left):
            units.append(Unit(len(units), first, page))
            first = page + 1
    units.append(Unit(len(units), first, page_count))
    return units


# -- a unit's result, as kept in staging_units.result ------------------------------------------------------------

def to_json(pages: PdfPages) -> dict:
    return {
        "elements": [[e.type, e.text, e.page_number, e.level] for e in pages.elements],
        "read_pages": [[p.page_number, p.image_sha256, p.engine, p.text, p.source_sha256, p.reused]
                       for p in pages.read_pages],
        # apart from the pages' six fields, which a worker of the release before reads as exactly six
        "words": {str(p.page_number): p.words for p in pages.read_pages if p.words is not None},
        "unread": pages.unread,
        "copy_protected": pages.copy_protected,
        "blank": pages.blank,
    }


def from_json(unit: dict) -> PdfPages:
    result = unit["result"]
    words = result.get("words") if isinstance(result.get("words"), dict) else {}  # none in a unit kept before
    return PdfPages(
        unit["first_page"], unit["last_page"],
        [Element(kind, text, page, level=level) for kind, text, page, level in result["elements"]],
        [ReadPage(page, image, engine, text, source, reused, words=ocr_words(words.get(str(page))))
         for page, image, engine, text, source, reused in result["read_pages"]],
        list(result["unread"]), bool(result["copy_protected"]),
        list(result.get("blank", [])),  # a unit kept before blank pages were told apart has none
    )


# -- staging_units ---------------------------------------------------------------------------------------------

def plan(conn: psycopg.Connection, file_id: int, content_hash: str, units: list[Unit]) -> None:
    """Record the file's units; units already recorded for the same bytes and pages are kept (done ones are
    reused), others (a file replanned under another unit size) are dropped first."""
    conn.execute(
        """DELETE FROM staging_units s WHERE file_id = %s AND NOT EXISTS (
               SELECT 1 FROM unnest(%s::int[], %s::int[], %s::int[]) AS u(n, f, l)
                WHERE u.n = s.unit_number AND u.f = s.first_page AND u.l = s.last_page AND s.content_hash = %s)""",
        (file_id, [u.number for u in units], [u.first_page for u in units], [u.last_page for u in units],
         content_hash))
    conn.execute("UPDATE staging_units SET reused = true WHERE file_id = %s AND state = 'done'", (file_id,))
    # planned by whoever holds the file now: a reader of an earlier attempt lost it (a unit it still writes is
    # kept, being written once)
    conn.execute("UPDATE staging_units SET leased_by = NULL, heartbeat_at = NULL WHERE file_id = %s AND state = "
                 "'pending'", (file_id,))
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO staging_units (file_id, unit_number, first_page, last_page, content_hash)
               VALUES (%s, %s, %s, %s, %s) ON CONFLICT (file_id, unit_number) DO NOTHING""",
            [(file_id, u.number, u.first_page, u.last_page, content_hash) for u in units])


# -- a unit's lease: the worker reading it renews it; stale, the unit goes to the next reader ------------------

HEARTBEAT_SECONDS = 5.0
# Six missed beats: a Postgres restart or a 10 s network cut does not hand a live reader's unit to another
# (which would only cost a second read: a unit is written once whoever reads it).
STALE_SECONDS = 30.0


def take(conn: psycopg.Connection, file_id: int, number: int, holder: str,
         stale_seconds: float = STALE_SECONDS) -> str:
    """Lease the unit to ``holder``: ``"taken"``; ``"done"`` when it is read already; ``"busy"`` while another
    reader renews its lease."""
    row = conn.execute(
        """UPDATE staging_units SET leased_by = %s, heartbeat_at = now()
            WHERE file_id = %s AND unit_number = %s AND state = 'pending'
              AND (leased_by IS NULL OR leased_by = %s OR heartbeat_at < now() - make_interval(secs => %s))
        RETURNING unit_number""", (holder, file_id, number, holder, stale_seconds)).fetchone()
    if row is not None:
        return "taken"
    state = conn.execute("SELECT state FROM staging_units WHERE file_id = %s AND unit_number = %s",
                         (file_id, number)).fetchone()
    return "busy" if state is not None and state["state"] == "pending" else "done"


def beat(conn: psycopg.Connection, file_id: int, number: int, holder: str) -> bool:
    """Renew the lease; False when the unit is no longer ``holder``'s (read meanwhile, or handed on as stale)."""
    return conn.execute(
        """UPDATE staging_units SET heartbeat_at = now()
            WHERE file_id = %s AND unit_number = %s AND state = 'pending' AND leased_by = %s
        RETURNING unit_number""", (file_id, number, holder)).fetchone() is not None


def release(conn: psycopg.Connection, file_id: int, number: int, holder: str) -> None:
    """Give the unit up unread (its reading failed): the next reader need not wait for the lease to go stale."""
    conn.execute("""UPDATE staging_units SET leased_by = NULL, heartbeat_at = NULL
                     WHERE file_id = %s AND unit_number = %s AND state = 'pending' AND leased_by = %s""",
                 (file_id, number, holder))


def hand_back_stale(conn: psycopg.Connection, stale_seconds: float = STALE_SECONDS) -> list[dict]:
    """The janitor's part: units whose reader stopped renewing its lease are free to read again (which pages,
    and who had them)."""
    return conn.execute(
        """UPDATE staging_units s SET leased_by = NULL, heartbeat_at = NULL
             FROM (SELECT file_id, unit_number, leased_by FROM staging_units
                    WHERE state = 'pending' AND leased_by IS NOT NULL
                      AND heartbeat_at < now() - make_interval(secs => %s) FOR UPDATE SKIP LOCKED) stale
            WHERE s.file_id = stale.file_id AND s.unit_number = stale.unit_number
        RETURNING s.file_id, s.unit_number, s.first_page, s.last_page, stale.leased_by""",
        (stale_seconds,)).fetchall()


class UnitLease:
    """Hold a taken unit while it is read: its lease is renewed every ``HEARTBEAT_SECONDS`` (``core/beats.py``:
    a failed renewal is logged and retried at the next); leaving with an error gives the unit up."""

    def __init__(self, db, file_id: int, number: int, holder: str, every: float = HEARTBEAT_SECONDS) -> None:
        self.db, self.file_id, self.number, self.holder = db, file_id, number, holder
        self._beat = Beat(self._renew, every, name=f"unit-lease-{file_id}-{number}",
                          what=f"lease of unit {number} of file {file_id}")

    def _renew(self) -> bool:
        with self.db.transaction() as conn:
            return beat(conn, self.file_id, self.number, self.holder)  # False: read by someone else meanwhile

    def __enter__(self) -> UnitLease:
        self._beat.start()
        return self

    def __exit__(self, exc_type, _exc, _tb) -> None:
        self._beat.stop()
        if exc_type is not None:
            try:
                with self.db.transaction() as conn:
                    release(conn, self.file_id, self.number, self.holder)
            except Exception as exc:  # the lease goes stale instead
                _log.warning("unit %d of file %d not given up: %s", self.number, self.file_id, exc)


def pending(conn: psycopg.Connection, file_id: int) -> list[Unit]:
    rows = conn.execute(
        """SELECT unit_number, first_page, last_page FROM staging_units
            WHERE file_id = %s AND state = 'pending' ORDER BY unit_number""", (file_id,)).fetchall()
    return [Unit(r["unit_number"], r["first_page"], r["last_page"]) for r in rows]


def finish(conn: psycopg.Connection, file_id: int, unit: Unit, pages: PdfPages, *, done_by: str,
           extract_ms: int) -> bool:
    """Keep a unit's result; False when it was done already (a second delivery: nothing is written)."""
    row = conn.execute(
        """UPDATE staging_units SET state = 'done', result = %s, done_by = %s, done_at = now(), extract_ms = %s,
                   leased_by = NULL, heartbeat_at = NULL
            WHERE file_id = %s AND unit_number = %s AND state = 'pending' RETURNING unit_number""",
        (Jsonb(to_json(pages)), done_by, extract_ms, file_id, unit.number)).fetchone()
    return row is not None


def counts(conn: psycopg.Connection, file_id: int) -> tuple[int, int]:
    """The file's units done, and planned."""
    row = conn.execute("""SELECT count(*) FILTER (WHERE state = 'done') AS done, count(*) AS planned
                            FROM staging_units WHERE file_id = %s""", (file_id,)).fetchone()
    return row["done"], row["planned"]


def done(conn: psycopg.Connection, file_id: int) -> tuple[int, list[PdfPages], dict]:
    """How many units the file has, the done ones' results in page order, and their figures (units reused from
    an earlier attempt, the milliseconds the done units took to read)."""
    planned = conn.execute("SELECT count(*) AS n FROM staging_units WHERE file_id = %s", (file_id,)).fetchone()["n"]
    rows = conn.execute(
        """SELECT DISTINCT ON (unit_number) unit_number, first_page, last_page, result, reused, extract_ms
             FROM staging_units WHERE file_id = %s AND state = 'done' ORDER BY unit_number""", (file_id,)).fetchall()
    # the makespan of this attempt's units: the first planned to the last kept (the units read side by side)
    wall = conn.execute(
        """SELECT coalesce(extract(epoch FROM max(done_at) - min(planned_at)) * 1000, 0)::int AS ms
             FROM staging_units WHERE file_id = %s AND state = 'done' AND NOT reused""", (file_id,)).fetchone()["ms"]
    figures = {"units_reused": sum(r["reused"] for r in rows),
               "units_extract_ms": sum(r["extract_ms"] or 0 for r in rows), "units_wall_ms": wall}
    return planned, [from_json(r) for r in rows], figures


def progress(conn: psycopg.Connection, file_id: int) -> dict | None:
    """A file's units as they are read (None for a file not read in units): units and pages done of all, pages
    read per second by this attempt's units, the ETA at that rate, and the units being read now (by whom, and
    how long ago their reader last renewed its lease: past ``STALE_SECONDS`` it is handed on)."""
    row = conn.execute(
        """SELECT count(*) AS units_total, count(*) FILTER (WHERE state = 'done') AS units_done,
                  coalesce(sum(last_page - first_page + 1), 0) AS pages_total,
                  coalesce(sum(last_page - first_page + 1) FILTER (WHERE state = 'done'), 0) AS pages_done,
                  coalesce(sum(last_page - first_page + 1) FILTER (WHERE state = 'done' AND NOT reused), 0)
                      AS pages_read,
                  extract(epoch FROM max(done_at) FILTER (WHERE NOT reused)
                                     - min(planned_at) FILTER (WHERE NOT reused)) AS seconds
             FROM staging_units WHERE file_id = %s""", (file_id,)).fetchone()
    if not row["units_total"]:
        return None
    seconds = float(row["seconds"] or 0)
    rate = row["pages_read"] / seconds if seconds > 0 else None
    left = row["pages_total"] - row["pages_done"]
    reading = conn.execute(
        """SELECT unit_number AS unit, first_page, last_page, leased_by AS reader,
                  round(extract(epoch FROM now() - heartbeat_at)::numeric, 1)::float AS beat_seconds_ago
             FROM staging_units WHERE file_id = %s AND state = 'pending' AND leased_by IS NOT NULL
            ORDER BY unit_number""", (file_id,)).fetchall()
    return {"units_done": row["units_done"], "units_total": row["units_total"], "pages_done": row["pages_done"],
            "pages_total": row["pages_total"], "pages_per_s": None if rate is None else round(rate, 2),
            "eta_s": 0.0 if left == 0 else (None if rate is None else round(left / rate, 1)),
            "reading": [dict(r) for r in reading]}
