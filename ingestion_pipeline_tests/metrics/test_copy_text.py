"""Staging's COPY input (``metrics/staging_copy.copy_text``): every value a column can hold reads back from a real
COPY exactly as it went in — escapes, NULL against empty text, a literal ``\\N``, several chunks."""

from __future__ import annotations

import pyarrow as pa

from ingestion_pipeline.metrics.staging_copy import copy_text

AWKWARD = ["plain", "", None, "tab\there", "line\nbreak", "carriage\rreturn", "back\\slash", "\\N", "\\.",
           "ends in a backslash\\", "\"quoted\", comma", "Été ☀ 日本", "\\t not a tab"]


def test_every_value_reads_back_from_copy_as_it_went_in(db):
    db.execute("CREATE TEMP TABLE copied (n bigint, a text, b text, d date, e text)")
    n = pa.array(range(len(AWKWARD)), pa.int64())
    a = pa.array(AWKWARD, pa.string())
    b = pa.chunked_array([AWKWARD[:5], AWKWARD[5:]], pa.string())  # chunked unlike its neighbours
    d = pa.array(["2024-03-01", None] * (len(AWKWARD) // 2) + ["2024-02-29"], pa.string())
    e = pa.array(AWKWARD, pa.large_string())  # not Arrow's plain string type: cast, then escaped alike
    text = copy_text([n, a, b, d, e])
    assert bytes(text).count(b"\n") == len(AWKWARD)  # one line per row: breaks inside values are escaped
    with db.cursor().copy("COPY copied (n, a, b, d, e) FROM STDIN") as copy:
        copy.write(text)
    rows = db.execute("SELECT n, a, b, d::text, e FROM copied ORDER BY n").fetchall()
    assert [(r["a"], r["b"], r["d"], r["e"]) for r in rows] == \
        list(zip(AWKWARD, AWKWARD, d.to_pylist(), AWKWARD, strict=True))


def test_a_slice_of_a_batch_is_encoded_alone(db):
    db.execute("CREATE TEMP TABLE copied (a text)")
    values = pa.array(AWKWARD, pa.string()).slice(3, 4)  # an offset into shared buffers
    with db.cursor().copy("COPY copied (a) FROM STDIN") as copy:
        copy.write(copy_text([values]))
    assert [r["a"] for r in db.execute("SELECT a FROM copied").fetchall()] == AWKWARD[3:7]
