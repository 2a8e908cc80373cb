"""The ledger mechanism: how a unit of work is claimed, kept, finished, retried and replayed.

A unit of work is a row of a ledger table: a document file (``ingestion_runs``) or a metric upload
(``data_uploads``). Each kind names its states in a ``LedgerTable``; the transitions are written once:

    queued --claim--> working --finish--> succeeded
      ^                  |  \\--fail (permanent)------------------> failed
      |                  |   \\-fail (transient, attempts left)--> queued, after a backoff
      |                  |    \\fail (transient, attempts spent)-> dead_letter
      +-- release -------+  (interrupted or paused: back to the queue, the attempt not counted)
      +-- requeue (replay of failed / dead_letter / canceled, a fresh budget of attempts)
    queued | working --cancel--> canceled

**Ownership.** A claim records an *owner* (the root Dagster run, so a re-execution continues what its
parent claimed) and a *lease* that the owner's heartbeat (``core/leases.py``) extends. A claim takes
rows that are queued and due, rows the same owner already holds, and rows whose lease expired
(``FOR UPDATE SKIP LOCKED``: two claimers never take the same row). Every write of a step first
*holds* its row (``SELECT … FOR NO KEY UPDATE`` where owner and state still match) in the same
transaction, so a worker that lost its lease raises ``LeaseLost`` and touches nothing.

**Attempts.** ``attempts`` counts claims; the retry budget (``ReliabilitySettings``: by default 4
attempts, waiting 5 s, 10 s, 30 s between them) counts from ``attempts_before_replay``. Every
transition appends a ``ledger_history`` row in the same transaction.

The mechanism is split by what it does: ``tables`` (the kinds of work, ``Worker``, history), ``claims``
(claim, hold, heartbeat, advance, finish), ``retries`` (fail, release, expired leases, a run's end) and
``replay`` (requeue, cancel); ``work_left`` says what a partition holds when a person's run finds nothing to do
in it. Callers use this package's names: ``ledger.claim(...)``.
"""

from ingestion_pipeline.core.ledger.claims import (
    advance,
    any_unfinished,
    claim,
    extend_leases,
    field_assignments,
    finish,
    heartbeat,
    heartbeat_many,
    held_by,
    hold,
    hold_many,
    select_replayable,
    states,
    update_fields,
)
from ingestion_pipeline.core.ledger.replay import cancel, requeue
from ingestion_pipeline.core.ledger.retries import (
    expire_leases,
    fail,
    fail_unclaimed,
    finalize_run,
    hold_longer_each_time,
    relaunch_stale_queued,
    release,
)
from ingestion_pipeline.core.ledger.tables import (
    DOCUMENT_FILES,
    METRIC_UPLOADS,
    TABLES,
    LeaseLost,
    LedgerTable,
    Worker,
    history,
    record,
    table_sql,
)
from ingestion_pipeline.core.ledger.work_left import REPLAY_FAILED_TAG, NothingToDo, nothing_to_do, partition_states

__all__ = [
    "DOCUMENT_FILES", "METRIC_UPLOADS", "REPLAY_FAILED_TAG", "TABLES", "LeaseLost", "LedgerTable", "NothingToDo",
    "Worker", "advance", "any_unfinished", "cancel", "claim", "expire_leases", "extend_leases", "fail",
    "fail_unclaimed", "field_assignments", "finalize_run", "finish", "heartbeat", "heartbeat_many", "held_by",
    "history", "hold", "hold_longer_each_time", "hold_many", "nothing_to_do", "partition_states", "record",
    "relaunch_stale_queued", "release", "requeue", "select_replayable", "states", "table_sql", "update_fields",
]
