"""A producer on the Redis list is untrusted: a message that breaks the parser is that message's dead letter,
never the round's; a dead letter keeps a bounded excerpt; the list is trimmed by count and age.

Before: 60 KB of ``[[[…]]]`` raised ``RecursionError`` out of the parser, the round died before any ledger work,
and the message came back after the heartbeat to kill the next round; a 1 MB message made a 5 MB dead letter."""

from __future__ import annotations

import json

import pytest

from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import MalformedJob, load_message, new_job, parse_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import push


@pytest.mark.parametrize("raw", [b"[" * 30_000 + b"]" * 30_000, b'{"a":' * 10_000 + b"1" + b"}" * 10_000],
                         ids=["lists", "objects"])
def test_deep_json_is_a_malformed_job(raw):
    with pytest.raises(MalformedJob, match="nested more than 8 levels deep"):
        parse_job(raw)


def test_depth_and_numbers_are_bounded():
    with pytest.raises(MalformedJob, match="nested more than 3"):
        load_message(b'{"a": [[{"b": 1}]]}', max_depth=3)
    assert load_message(b'{"a": [[1]]}', max_depth=3) == {"a": [[1]]}
    with pytest.raises(MalformedJob, match="not JSON"):
        parse_job(b'{"retry_count": ' + b"9" * 5000 + b"}")  # Python refuses an int of over 4,300 digits


def test_a_hostile_message_does_not_stop_the_jobs_behind_it(redis_queue, database, tmp_path):
    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nalpha\n")
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)
    deep = b"[" * 30_000 + b"]" * 30_000  # 60 KB: under the 64 KiB message limit
    redis_queue.lpush(redis_contract.QUEUE, deep)
    good = new_job("kb1", str(root / "a.md"))
    push(redis_queue, good)  # behind the hostile one: the consumer takes from the right, the deep one first
    report = RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                              max_bytes=10**6).consume(10)
    assert (report.taken, report.outcomes["malformed"], report.outcomes["accepted"]) == (2, 1, 1)
    assert redis_contract.read_status(redis_queue, good.job_id)["status"] == "queued"
    [entry] = redis_contract.list_dead_letters(redis_queue)
    assert entry["error_code"] == "ERR_MALFORMED_MESSAGE" and "nested more than 8 levels" in entry["reason"]
    assert redis_contract.depths(redis_queue)["processing"] == 0  # nothing left held for the heartbeat to return


def test_a_dead_letter_keeps_a_bounded_excerpt(redis_queue, database, tmp_path):
    huge = b'{"job_id": "' + b"\x01" * (1 << 20) + b'"}'  # 1 MiB of control bytes: escaped, it would be 6 MB
    redis_queue.lpush(redis_contract.QUEUE, huge)
    RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                     max_bytes=10**6).consume(1)
    [raw] = redis_queue.lrange(redis_contract.DEAD_LETTER, 0, -1)
    assert len(raw) < 16_000
    entry = json.loads(raw)
    assert entry["truncated"] is True and entry["message_bytes"] == len(huge)
    assert len(entry["message_sha256"]) == 64 and "over the 65,536 byte limit" in entry["reason"]
    assert redis_contract.replay_dead_letters(redis_queue) == []  # it would only be refused again
    assert redis_contract.dead_letter_count(redis_queue) == 1


def test_the_dead_letter_list_is_trimmed_by_count_and_age(redis_queue):
    def entry(when: str, n: int) -> bytes:
        return json.dumps({"reason": "r", "error_code": "E", "dead_lettered_at": when, "priority": "normal",
                           "job_id": None, "message": str(n)}).encode()

    # newest first: LPUSH the old ones first
    redis_queue.lpush(redis_contract.DEAD_LETTER, entry("2020-01-01T00:00:00Z", 0), entry("2020-01-02T00:00:00Z", 1),
                      *(entry(redis_contract.utc_timestamp(), n) for n in range(2, 12)))
    assert redis_contract.trim_dead_letters(redis_queue, max_entries=100) == 2  # the two from 2020
    assert redis_contract.dead_letter_count(redis_queue) == 10
    assert redis_contract.trim_dead_letters(redis_queue, max_entries=4) == 6
    assert [e["message"] for e in redis_contract.list_dead_letters(redis_queue)] == ["11", "10", "9", "8"]


def test_the_dead_letter_bounds_are_settings(redis_queue, database, tmp_path, monkeypatch):
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.queues.redis_consumer import take_jobs

    monkeypatch.setenv("INGESTION_DEAD_LETTER_MAX_ENTRIES", "3")
    monkeypatch.setenv("INGESTION_DEAD_LETTER_MAX_AGE_DAYS", "0.5")
    old = json.dumps({"reason": "r", "error_code": "E", "dead_lettered_at": "2020-01-01T00:00:00Z",
                      "priority": "normal", "job_id": None, "message": "old"}).encode()
    redis_queue.lpush(redis_contract.DEAD_LETTER, old)
    for n in range(5):  # five messages that cannot become jobs
        redis_queue.lpush(redis_contract.queue("normal"), f"not json {n}")
    take_jobs(redis_queue, database, LocalUploadStore(tmp_path / "store"), load_settings(), fingerprint="f")
    kept = redis_contract.list_dead_letters(redis_queue)
    assert len(kept) == 3 and all(e["error_code"] == "ERR_MALFORMED_MESSAGE" for e in kept)
