"""What the Redis queue stores is read back as untrusted, like a message: a malformed dead letter, delayed
retry, consumer id or status hash is that record's problem, never the round's, and every tenant's jobs behind
it are still taken. Dead letters are bounded in bytes as well as in count and age."""

from __future__ import annotations

import json

import pytest

from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import MAX_MESSAGE_BYTES, new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import push

MALFORMED_DEAD_LETTERS = {
    "time without a zone": json.dumps({"reason": "r", "error_code": "E", "dead_lettered_at": "2020-01-01T00:00:00",
                                       "priority": "normal", "job_id": "j", "message": "{}"}).encode(),
    "time as a number": json.dumps({"reason": "r", "error_code": "E", "dead_lettered_at": 1577836800}).encode(),
    "null": b"null",
    "a list": b"[1, 2]",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "not JSON": b"\xff\xfe garbage",
    "fields of the wrong type": json.dumps({"reason": ["x"], "error_code": 7, "job_id": {"a": 1},
                                            "priority": "urgent", "message": 5}).encode(),
}


def _consumer(redis_queue, database, tmp_path) -> RedisJobConsumer:
    return RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                            max_bytes=10**6)


def _two_tenants_jobs(redis_queue, database, tmp_path) -> list:
    jobs = []
    for tenant in ("acme", "globex"):
        root = tmp_path / tenant / "incoming"
        root.mkdir(parents=True)
        (root / "a.md").write_text(f"# {tenant}\n\nalpha\n")
        with database.transaction() as conn:
            add_rag(conn, f"kb_{tenant}", tenant_id=tenant, root=root.parent)
        jobs.append(new_job(f"kb_{tenant}", str(root / "a.md")))
        push(redis_queue, jobs[-1])
    return jobs


@pytest.mark.parametrize("entry", MALFORMED_DEAD_LETTERS.values(), ids=MALFORMED_DEAD_LETTERS.keys())
def test_a_malformed_dead_letter_stops_no_round(entry, redis_queue, database, tmp_path):
    redis_queue.rpush(redis_contract.DEAD_LETTER, entry)  # the oldest: the first the age trim reads
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    report = _consumer(redis_queue, database, tmp_path).consume(10)
    assert report.outcomes["accepted"] == 2
    assert all(redis_contract.read_status(redis_queue, j.job_id)["status"] == "queued" for j in jobs)
    assert redis_contract.dead_letter_count(redis_queue) == 0  # old, or no age to keep it by: trimmed


@pytest.mark.parametrize("name", MALFORMED_DEAD_LETTERS)
def test_a_malformed_dead_letter_is_listed_with_fields_of_their_types_and_replayed_only_whole(name, redis_queue):
    redis_queue.lpush(redis_contract.DEAD_LETTER, MALFORMED_DEAD_LETTERS[name])
    [item] = redis_contract.list_dead_letters(redis_queue)
    assert isinstance(item["reason"], str) and isinstance(item["error_code"], str)
    assert item["job_id"] is None or isinstance(item["job_id"], str)
    assert item["priority"] in redis_contract.PRIORITIES
    replayed = redis_contract.replay_dead_letters(redis_queue)
    assert len(replayed) == (1 if name == "time without a zone" else 0)  # the only one holding its message
    assert redis_contract.dead_letter_count(redis_queue) == 1 - len(replayed)


def test_an_entry_without_a_zone_is_aged_as_utc():
    letter = redis_contract.read_dead_letter(MALFORMED_DEAD_LETTERS["time without a zone"])
    assert letter.dead_lettered_at is not None and letter.dead_lettered_at.utcoffset().total_seconds() == 0
    assert letter.readable and letter.message == b"{}"


def test_a_malformed_delayed_retry_is_dead_lettered_and_the_due_ones_still_return(redis_queue, database, tmp_path):
    due = json.dumps({"queue": redis_contract.queue("normal"), "message": "a good retry"})
    elsewhere = json.dumps({"queue": "some:other:list", "message": "pushed anywhere"})
    redis_queue.zadd(redis_contract.DELAYED, {b"{not json": 1, due: 2, elsewhere: 3, b"[" * 5000 + b"]" * 5000: 4})
    moved = _consumer(redis_queue, database, tmp_path).return_due()
    assert moved == 1 and redis_queue.zcard(redis_contract.DELAYED) == 0
    assert redis_queue.lrange(redis_contract.queue("normal"), 0, -1) == [b"a good retry"]
    assert not redis_queue.exists("some:other:list")  # a member names no list outside the queues
    letters = redis_contract.list_dead_letters(redis_queue)
    assert len(letters) == 3 and {e["error_code"] for e in letters} == {"ERR_MALFORMED_RECORD"}
    assert not any(e["replayable"] for e in letters)


def test_consumer_ids_and_statuses_that_are_not_utf8_are_read_without_failing(redis_queue, database, tmp_path):
    redis_queue.sadd(redis_contract.CONSUMERS, b"\xff\xfe-not-an-id")
    redis_queue.hset(redis_contract.status("j1"), mapping={b"status": b"\xff", b"\xfe": b"x"})
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    assert _consumer(redis_queue, database, tmp_path).consume(10).outcomes["accepted"] == 2
    assert redis_queue.smembers(redis_contract.CONSUMERS) == set()  # the janitor removed what no consumer wrote
    assert redis_contract.read_status(redis_queue, "j1")["status"] == "\ufffd"
    assert redis_contract.read_status(redis_queue, jobs[0].job_id)["status"] == "queued"


@pytest.mark.parametrize("payload", [bytes(range(256)) * (MAX_MESSAGE_BYTES // 256),  # not UTF-8: was 5x
                                     b"\x01" * MAX_MESSAGE_BYTES,  # UTF-8, each byte escaped as \u0001: 6x
                                     "é".encode() * (MAX_MESSAGE_BYTES // 2)],  # two bytes each: was 3x
                         ids=["binary", "control characters", "accented"])
def test_a_dead_letter_is_at_most_a_third_over_its_message_and_replays_byte_for_byte(payload, redis_queue):
    entry = redis_contract.dead_letter_entry(payload, reason="r", error_code="E", priority="low", job_id=None)
    assert len(entry) <= len(payload) * 4 // 3 + 512
    redis_queue.lpush(redis_contract.DEAD_LETTER, entry)
    [moved] = redis_contract.replay_dead_letters(redis_queue)
    assert redis_queue.lrange(redis_contract.queue("low"), 0, -1) == [payload]
    assert moved["replayable"]


def test_the_dead_letter_list_is_trimmed_to_its_bytes_oldest_first(redis_queue):
    for n in range(40):  # 40 entries of ~10 KB, the oldest pushed first
        redis_queue.lpush(redis_contract.DEAD_LETTER, redis_contract.dead_letter_entry(
            f"{n:03d}".encode() + b"x" * 10_000, reason="r", error_code="E", priority="normal"))
    assert redis_contract.trim_dead_letters(redis_queue, max_bytes=10**9) == 0
    dropped = redis_contract.trim_dead_letters(redis_queue, max_bytes=100_000)
    kept = redis_contract.list_dead_letters(redis_queue)
    assert dropped == 40 - len(kept) and 8 <= len(kept) <= 9
    assert sum(len(e) for e in redis_queue.lrange(redis_contract.DEAD_LETTER, 0, -1)) <= 100_000
    assert kept[0]["message"].startswith("039") and kept[-1]["message"].startswith(f"{40 - len(kept):03d}")


def test_the_byte_bound_is_a_setting(redis_queue, database, tmp_path, monkeypatch):
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.queues.redis_consumer import take_jobs

    monkeypatch.setenv("INGESTION_DEAD_LETTER_MAX_BYTES", "30000")
    for _ in range(10):
        redis_queue.lpush(redis_contract.DEAD_LETTER, redis_contract.dead_letter_entry(
            b"y" * 10_000, reason="r", error_code="E", priority="normal"))
    take_jobs(redis_queue, database, LocalUploadStore(tmp_path / "store"), load_settings(), fingerprint="f")
    assert 1 <= redis_contract.dead_letter_count(redis_queue) <= 2
    with pytest.raises(ValueError, match="INGESTION_DEAD_LETTER_MAX_BYTES must be"):
        monkeypatch.setenv("INGESTION_DEAD_LETTER_MAX_BYTES", "0")
        load_settings()


def test_an_old_entry_of_text_with_escapes_still_replays(redis_queue):
    old = json.dumps({"reason": "r", "error_code": "E", "dead_lettered_at": redis_contract.utc_timestamp(),
                      "priority": "normal", "job_id": None, "message": "caf\\xe9"}).encode()
    redis_queue.lpush(redis_contract.DEAD_LETTER, old)
    assert len(redis_contract.replay_dead_letters(redis_queue)) == 1
    assert redis_queue.lrange(redis_contract.QUEUE, 0, -1) == [b"caf\\xe9"]


def test_a_filename_that_is_not_text_is_a_malformed_job_not_a_dead_round(redis_queue, database, tmp_path):
    """JSON's "\\udc80" decodes to a lone surrogate that no status hash or row can hold: before, writing the
    status raised out of the round, the message went back to the queue's taking end, and intake stopped."""
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    redis_queue.rpush(redis_contract.QUEUE, json.dumps({**json.loads(jobs[0].to_json()), "job_id": "x",
                                                         "filename": "\udc80.md"}).encode())
    report = _consumer(redis_queue, database, tmp_path).consume(10)
    assert (report.outcomes["malformed"], report.outcomes["accepted"]) == (1, 2)
    [letter] = redis_contract.list_dead_letters(redis_queue)
    assert letter["error_code"] == "ERR_MALFORMED_MESSAGE"


def test_a_planted_key_of_another_type_stops_neither_the_janitor_nor_the_depths(redis_queue, database, tmp_path):
    redis_queue.sadd(redis_contract.CONSUMERS, "evil")
    redis_queue.set(redis_contract.processing("evil", "high"), "not a list")
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    assert _consumer(redis_queue, database, tmp_path).consume(10).outcomes["accepted"] == 2
    assert redis_contract.read_status(redis_queue, jobs[1].job_id)["status"] == "queued"
    redis_queue.sadd(redis_contract.CONSUMERS, "evil")  # planted again, before `queue status` reads it
    assert redis_contract.depths(redis_queue)["processing"] == 0


def test_the_newest_entry_alone_over_the_byte_bound_leaves_an_empty_list(redis_queue):
    redis_queue.lpush(redis_contract.DEAD_LETTER, redis_contract.dead_letter_entry(
        b"z" * 5_000, reason="r", error_code="E", priority="normal"))
    assert redis_contract.trim_dead_letters(redis_queue, max_bytes=1_000) == 1
    assert redis_contract.dead_letter_count(redis_queue) == 0


def test_a_status_hash_planted_with_another_type_is_replaced_not_a_dead_round(redis_queue, database, tmp_path):
    """Producers write the status keys too: one planted as a string or a list made every round that wrote the
    job's status raise (WRONGTYPE), at intake and at the final status, for every tenant's jobs behind it."""
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    redis_queue.set(redis_contract.status(jobs[0].job_id), "not a hash")
    redis_queue.delete(redis_contract.status(jobs[1].job_id))
    redis_queue.rpush(redis_contract.status(jobs[1].job_id), "nor", "this")
    assert redis_contract.read_status(redis_queue, jobs[1].job_id) == {}
    assert _consumer(redis_queue, database, tmp_path).consume(10).outcomes["accepted"] == 2
    assert [redis_contract.read_status(redis_queue, j.job_id)["status"] for j in jobs] == ["queued", "queued"]


@pytest.mark.parametrize("key", [redis_contract.DEAD_LETTER, redis_contract.DELAYED, redis_contract.CONSUMERS,
                                 redis_contract.queue("high")])
def test_the_contracts_own_keys_planted_with_another_type_are_set_aside(key, redis_queue, database, tmp_path):
    redis_queue.set(key, "x")
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    assert _consumer(redis_queue, database, tmp_path).consume(10).outcomes["accepted"] == 2
    assert all(redis_contract.read_status(redis_queue, j.job_id)["status"] == "queued" for j in jobs)
    [aside] = redis_queue.keys(f"{key}:unreadable:*")
    assert redis_queue.get(aside) == b"x"  # kept for whoever looks
    redis_queue.set(key, "y")  # again, before the operator's commands read it
    assert redis_contract.depths(redis_queue)["dead_letter"] == 0
    assert redis_contract.list_dead_letters(redis_queue) == [] and redis_contract.replay_dead_letters(redis_queue) == []


def test_a_flood_of_planted_consumer_ids_is_drained_in_bounded_rounds(redis_queue, database, tmp_path):
    """200,000 planted ids made a round take minutes, one Redis command after another per id."""
    redis_queue.sadd(redis_contract.CONSUMERS, *(f"planted-{n}" for n in range(25_000)))
    redis_queue.rpush(redis_contract.processing("planted-7", "high"), "a held job")
    consumer = _consumer(redis_queue, database, tmp_path)
    assert len(redis_contract.depths(redis_queue)["consumers"]) == redis_contract.CONSUMERS_SHOWN
    consumer.return_abandoned(limit=10_000)
    assert redis_queue.scard(redis_contract.CONSUMERS) >= 14_000  # a bounded share a round
    while redis_queue.scard(redis_contract.CONSUMERS):
        consumer.return_abandoned()
    assert redis_queue.lrange(redis_contract.queue("high"), 0, -1) == [b"a held job"]  # handed back, not lost
    jobs = _two_tenants_jobs(redis_queue, database, tmp_path)
    assert consumer.consume(10).outcomes["accepted"] == 2
    assert redis_contract.read_status(redis_queue, jobs[0].job_id)["status"] == "queued"


def test_dead_letters_written_within_a_round_keep_to_the_byte_bound(redis_queue, database, tmp_path):
    """The bound was applied at a round's start only: 50 messages of 64 KiB in one round left 4.4 MB under a
    100 KB bound."""
    for n in range(50):
        redis_queue.lpush(redis_contract.QUEUE, bytes([n % 200 + 50]) + b"\xff" * (MAX_MESSAGE_BYTES - 1))
    RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                     max_bytes=10**6, dead_letter_max_bytes=100_000).consume(50)
    assert sum(len(e) for e in redis_queue.lrange(redis_contract.DEAD_LETTER, 0, -1)) <= 100_000
    assert redis_contract.dead_letter_count(redis_queue) >= 1
