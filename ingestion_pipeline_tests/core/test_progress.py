"""Progress reports: files, chunks, rate and ETA, throttled; a status line on a terminal, JSON elsewhere."""

from __future__ import annotations

import io
import json
import logging

from ingestion_pipeline.core.progress import Progress, install_terminal_reporter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reports_are_throttled_and_carry_rate_and_eta():
    clock, seen = FakeClock(), []
    progress = Progress("embed", 10, sinks=[seen.append], interval=2.0, clock=clock)
    clock.now += 1
    progress.advance(files=1, chunks=40)
    assert seen == []  # within the interval: nothing yet
    clock.now += 1.5
    progress.advance(files=1, chunks=60)
    assert seen == ["embed: 2/10 files, 100 chunks (40.0/s), 0.80 files/s, elapsed 2s, ETA 10s"]
    clock.now += 10
    progress.advance(files=8)
    progress.finish()
    assert seen[-1].startswith("embed: 10/10 files") and seen[-1].endswith("ETA 0s")
    snapshot = progress.snapshot()
    assert snapshot["files_done"] == 10 and snapshot["eta_s"] == 0.0


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_line_and_json_lines():
    logger = logging.getLogger("ingestion_pipeline.progress")
    for stream, tty in ((io.StringIO(), False), (_Tty(), True)):
        handler = install_terminal_reporter(stream)
        try:
            clock = FakeClock()
            progress = Progress("chunk", 2, clock=clock, interval=0)
            clock.now += 1
            progress.advance(files=1, chunks=5)
            progress.finish()
        finally:
            logger.removeHandler(handler)
        out = stream.getvalue()
        if tty:
            assert out.startswith("\r\x1b[2Kchunk: 1/2 files") and out.endswith("\n") and out.count("\n") == 1
        else:
            lines = [json.loads(line) for line in out.splitlines()]
            assert [line["event"] for line in lines] == ["progress", "progress"]
            assert lines[-1]["final"] is True and lines[-1]["chunks"] == 5 and lines[-1]["files_total"] == 2


def test_with_a_chunk_total_the_eta_follows_chunks_not_files():
    """Embedding: one big file holds most chunks; an ETA by files would be far off."""
    clock, seen = FakeClock(), []
    progress = Progress("embed", 3, total_chunks=1000, sinks=[seen.append], interval=0, clock=clock)
    clock.now += 10
    progress.advance(chunks=250)  # a quarter of the chunks in 10 s, no file finished yet
    assert progress.snapshot()["eta_s"] == 30.0
    assert seen[-1].startswith("embed: 0/3 files, 250/1,000 chunks (25.0/s)") and seen[-1].endswith("ETA 30s")


def test_with_a_token_total_the_eta_holds_while_chunks_grow_longer():
    """The embed step encodes the shortest chunks first and the model's time follows tokens: an ETA by chunks
    grew as the chunks did (100 s to 180 s in `make demo`), one by tokens holds."""
    clock, seen = FakeClock(), []
    lengths = [10 + i for i in range(100)]  # tokens per chunk, shortest first: 10 … 109
    progress = Progress("embed", 1, total_chunks=len(lengths), sinks=[seen.append], interval=0, clock=clock)
    progress.count_tokens(sum(lengths))
    by_chunks, by_tokens, start = [], [], clock.now
    for n in lengths:
        clock.now += n * 0.01  # 10 ms per token
        progress.advance(chunks=1, tokens=n)
        s, elapsed = progress.snapshot(), clock.now - start
        by_tokens.append(elapsed + s["eta_s"])  # when it says it will end
        left = len(lengths) - s["chunks"]
        by_chunks.append(elapsed + left / (s["chunks"] / elapsed))
    end = sum(lengths) * 0.01
    assert all(abs(t - end) < 0.2 for t in by_tokens)  # eta_s is rounded to 0.1 s
    assert by_chunks[9] < 0.5 * end  # after 10 short chunks, an ETA by chunks said under half the time
    assert "tokens" in seen[-1] and seen[-1].endswith("ETA 0s")


def test_row_progress_follows_the_bytes_read_for_its_eta():
    from ingestion_pipeline.core.progress import RowProgress

    clock, seen = FakeClock(), []
    progress = RowProgress("staging upload 7", 200_000_000, sinks=[seen.append], interval=2.0, clock=clock)
    clock.now += 1
    progress.advance(30_000, 10_000_000)
    assert seen == []  # within the interval
    clock.now += 4
    progress.advance(70_000, 50_000_000)
    assert seen == ["staging upload 7: 100,000 rows (20,000/s), 50 of 200 MB read (25%), elapsed 5s, ETA 15s"]
    progress.advance(0, 40_000_000)  # a position behind the last one (a path starting over) is not progress back
    assert progress.bytes_read == 50_000_000
    clock.now += 15
    progress.advance(300_000, 250_000_000)  # read-ahead past the end counts as the end
    progress.finish()
    assert seen[-1] == "staging upload 7: 400,000 rows (20,000/s), 200 of 200 MB read (100%), elapsed 20s, ETA 0s"
    assert progress.snapshot()["eta_s"] == 0.0


def test_count_progress_and_unit_progress_follow_their_own_counts():
    from ingestion_pipeline.core.progress import CountProgress, UnitProgress

    clock, seen = FakeClock(), []
    vectors = CountProgress("index", 3_000, "vectors", sinks=[seen.append], interval=2.0, clock=clock)
    assert vectors.snapshot()["eta_s"] is None  # nothing done yet: no rate, no ETA
    clock.now += 2
    vectors.advance(1_000)
    assert seen == ["index: 1,000/3,000 vectors (500/s), elapsed 2s, ETA 4s"]
    clock.now += 4
    vectors.advance(2_500)  # more than the total (promoted while sweeping): done, not a negative ETA
    vectors.finish()
    assert seen[-1] == "index: 3,500/3,000 vectors (583/s), elapsed 6s, ETA 0s"

    seen.clear()
    units = UnitProgress("extract", 4, 100, sinks=[seen.append], interval=2.0, clock=clock)
    clock.now += 2
    units.advance(1, 20)
    units.advance(1, 30, read=False)  # kept by an earlier attempt: done, but not this attempt's rate
    assert units.snapshot()["pages_per_s"] == 10.0 and units.snapshot()["eta_s"] == 5.0
    units.finish()
    assert seen[-1] == "extract: 2/4 units, 50/100 pages (10.00 pages/s), elapsed 2s, ETA 5s"
