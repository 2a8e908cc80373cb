"""How often a Celery run's process looks for its finished steps: soon after an event, seldom while steps run,
never more reads a second than the bound."""

import time

from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData, StepSuccessData

from ingestion_pipeline.runtime.celery_pace import QUICK_SECONDS, Pace, PacedClock
from ingestion_pipeline.runtime.dagster_internals import celery_step_sent_or_ended


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_look_comes_soon_after_a_step_was_sent_or_ended_and_the_pause_grows_with_the_wait():
    clock = _Clock()
    pace = Pace(longest=0.2, clock=clock)
    pace.sent()
    assert pace.next_pause() == QUICK_SECONDS
    clock.now += 0.5  # half a second into the step: a look every 0.05 s
    assert pace.next_pause() == 0.05
    clock.now += 60  # a long step: a look every INGESTION_CELERY_POLL_SECONDS
    assert pace.next_pause() == 0.2
    pace.ended()
    assert pace.next_pause() == QUICK_SECONDS and pace.in_flight == 0


def test_many_steps_in_flight_are_read_no_more_often_than_the_bound():
    clock = _Clock()
    pace = Pace(longest=0.2, reads_per_second=500, clock=clock)
    for _ in range(400):
        pace.sent()
    assert pace.next_pause() == 0.8  # 400 reads a look: at most 500 a second
    for _ in range(399):
        pace.ended()
    assert pace.next_pause() == QUICK_SECONDS  # one left in flight


def test_the_clock_sleeps_the_pace_not_the_loops_tick_and_is_the_time_module_otherwise():
    pace = Pace(longest=0.05)
    clock = PacedClock(pace)
    start = time.perf_counter()
    clock.sleep(1.0)  # dagster-celery's fixed tick, ignored
    assert time.perf_counter() - start < 0.5
    assert clock.monotonic() > 0 and clock.time() > 0


def _event(kind: DagsterEventType, message: str = "") -> DagsterEvent:
    data = {DagsterEventType.ENGINE_EVENT: EngineEventData(),
            DagsterEventType.STEP_SUCCESS: StepSuccessData(duration_ms=1.0)}.get(kind)
    return DagsterEvent(kind.value, "job", message=message, event_specific_data=data)


def observe(pace: Pace, event: DagsterEvent) -> None:
    """As the paced executor does (runtime/executor.py)."""
    happened = celery_step_sent_or_ended(event)
    if happened == "sent":
        pace.sent()
    elif happened == "ended":
        pace.ended()


def test_the_loops_events_tell_the_pace_what_was_sent_and_what_ended():
    pace = Pace(longest=0.2)
    observe(pace, _event(DagsterEventType.ENGINE_EVENT, 'Submitting celery task for step "a" to queue "dagster".'))
    observe(pace, _event(DagsterEventType.ENGINE_EVENT, 'Submitting celery task for step "b" to queue "dagster".'))
    assert pace.in_flight == 2
    observe(pace, _event(DagsterEventType.ENGINE_EVENT, 'Executing steps a in celery worker'))
    assert pace.in_flight == 2
    observe(pace, _event(DagsterEventType.STEP_SUCCESS))
    observe(pace, _event(DagsterEventType.ENGINE_EVENT, 'celery task for running step "b" was revoked.'))
    assert pace.in_flight == 0
