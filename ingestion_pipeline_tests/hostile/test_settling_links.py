"""Settling a Redis job's file (``processed/``, ``failed/`` with its ``.error.json``) follows no link: the
consumer often runs as root, and a link planted in the rag's folder must not move or write anything outside it.

Before: a ``failed/<name>.error.json`` planted as a link to a file outside the root was overwritten with the
failure record; a ``failed/`` that was a link moved the job's file and its record outside the root."""

from __future__ import annotations

import json

from ingestion_pipeline.queues.settling import settle

FAILURE = {"job_id": "rag-kb1-1-00000000", "error": "boom"}


def _rag(tmp_path):
    incoming = tmp_path / "kb" / "incoming"
    incoming.mkdir(parents=True)
    (incoming / "a.md").write_text("# A\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    return incoming, outside


def test_a_planted_error_record_link_is_replaced_not_written_through(tmp_path):
    incoming, outside = _rag(tmp_path)
    victim = outside / "passwd"
    victim.write_text("root:x:0:0\n")
    (tmp_path / "kb" / "failed").mkdir()
    (tmp_path / "kb" / "failed" / "a.md.error.json").symlink_to(victim)
    moved = settle(str(incoming / "a.md"), "failed", FAILURE["job_id"], FAILURE, root=incoming.parent)
    assert moved == tmp_path / "kb" / "failed" / "a.md"
    assert victim.read_text() == "root:x:0:0\n"
    record = tmp_path / "kb" / "failed" / "a.md.error.json"
    assert not record.is_symlink() and json.loads(record.read_text()) == FAILURE


def test_a_destination_folder_that_is_a_link_is_not_followed(tmp_path):
    incoming, outside = _rag(tmp_path)
    (tmp_path / "kb" / "failed").symlink_to(outside)
    assert settle(str(incoming / "a.md"), "failed", FAILURE["job_id"], FAILURE, root=incoming.parent) is None
    assert (incoming / "a.md").is_file() and list(outside.iterdir()) == []
    (tmp_path / "kb" / "processed").symlink_to(outside)
    assert settle(str(incoming / "a.md"), "done", FAILURE["job_id"], root=incoming.parent) is None
    assert (incoming / "a.md").is_file() and list(outside.iterdir()) == []


def test_a_source_that_is_a_link_or_in_a_linked_folder_stays(tmp_path):
    incoming, outside = _rag(tmp_path)
    (outside / "secret.md").write_text("secret\n")
    (incoming / "link.md").symlink_to(outside / "secret.md")
    assert settle(str(incoming / "link.md"), "done", FAILURE["job_id"], root=incoming.parent) is None
    linked = tmp_path / "kb2"
    linked.mkdir()
    (linked / "incoming").symlink_to(outside)
    assert settle(str(linked / "incoming" / "secret.md"), "done", FAILURE["job_id"], root=linked) is None
    assert (outside / "secret.md").is_file() and not (linked / "processed").exists()


def test_a_taken_name_gets_the_job_id_and_nothing_is_overwritten(tmp_path):
    incoming, _ = _rag(tmp_path)
    (tmp_path / "kb" / "processed").mkdir()
    (tmp_path / "kb" / "processed" / "a.md").write_text("earlier\n")
    moved = settle(str(incoming / "a.md"), "done", "rag-kb1-1-0000000a", root=incoming.parent)
    assert moved.name == "a.rag-kb1-1-0000000a.md" and moved.read_text() == "# A\n"
    assert (tmp_path / "kb" / "processed" / "a.md").read_text() == "earlier\n"
