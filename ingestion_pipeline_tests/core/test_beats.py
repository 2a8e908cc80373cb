"""The beat that keeps a lease alive: it goes on through failures and ends when the lease is someone else's."""

import logging
import threading
import time

from ingestion_pipeline.core.beats import Beat


def _wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_a_failed_beat_is_logged_and_the_next_one_still_comes(caplog):
    calls: list[float] = []

    def flaky() -> None:
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise ConnectionError("the database is restarting")

    with caplog.at_level(logging.WARNING, logger="ingestion_pipeline.beats"):
        beat = Beat(flaky, 0.02, name="test-beat", what="lease of test").start()
        try:
            assert _wait_for(lambda: len(calls) >= 5)
        finally:
            beat.stop()
    failures = [r.getMessage() for r in caplog.records]
    assert len(failures) == 2 and all(m.startswith("lease of test: a beat failed (the database is restarting)")
                                      for m in failures)


def test_beating_ends_when_the_lease_is_someone_elses_and_stop_ends_it_otherwise():
    calls = []
    ended = Beat(lambda: calls.append(1) or len(calls) < 3, 0.01, name="test-beat", what="unit").start()
    assert _wait_for(lambda: not ended._thread.is_alive())
    assert len(calls) == 3  # the third beat returned False: no fourth
    ended.stop()

    kept = Beat(lambda: None, 0.01, name="test-beat-kept", what="run").start()
    time.sleep(0.05)
    assert kept._thread.is_alive()
    kept.stop()
    assert not kept._thread.is_alive()
    assert not any(t.name == "test-beat-kept" for t in threading.enumerate())
