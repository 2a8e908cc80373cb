"""Settling walks from the rag's registered root to the job's file one folder at a time and follows no link on
the way: whoever can write in a rag's folder can replace any folder on the path with a link after the job was
queued, and the consumer (often root) must then move and write nothing outside the root, nor anywhere the
link points inside it."""

from __future__ import annotations

import json
import logging

import pytest

from ingestion_pipeline.queues.settling import settle

FAILURE = {"job_id": "rag-kb1-1-00000000", "error": "boom"}


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def rag(tmp_path):
    root, outside = tmp_path / "rag", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    return root, outside


def _file(path, text="# A\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("status", ["done", "failed"])
@pytest.mark.parametrize("inner", ["team/report.txt", "team/incoming/report.txt"])
def test_an_intermediate_folder_replaced_by_a_link_moves_nothing_outside(rag, inner, status):
    root, outside = rag
    queued = _file(root / "a" / inner)
    victim = _file(outside / inner, "someone else's\n")
    (root / "a").rename(root / "a.queued")
    (root / "a").symlink_to(outside)  # after the job was queued
    before = _tree(outside)
    assert settle(str(queued), status, FAILURE["job_id"], FAILURE, root=root) is None
    assert victim.read_text() == "someone else's\n" and _tree(outside) == before
    assert (root / "a.queued" / inner).is_file()


@pytest.mark.parametrize("case", ["incoming", "two_up", "inside_root"])
def test_a_link_anywhere_on_the_path_is_refused(rag, case):
    root, outside = rag
    if case == "incoming":  # the job's own incoming folder
        source, target, linked = root / "kb" / "incoming" / "a.md", outside / "incoming", root / "kb" / "incoming"
    elif case == "two_up":  # the folder above the one that gets processed/ and failed/
        source, target, linked = root / "x" / "y" / "incoming" / "a.md", outside, root / "x"
    else:  # the root's child, a link to another folder inside the root: still a link, still refused
        source, target, linked = root / "a" / "y" / "incoming" / "a.md", root / "b", root / "a"
    victim = _file(target / "y" / "incoming" / "a.md" if case != "incoming" else target / "a.md", "victim\n")
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.symlink_to(target)
    before_outside, before_root = _tree(outside), _tree(root)
    assert settle(str(source), "failed", FAILURE["job_id"], FAILURE, root=root) is None
    assert victim.read_text() == "victim\n"
    assert _tree(outside) == before_outside and _tree(root) == before_root


def test_a_root_that_became_a_link_is_refused(rag, tmp_path):
    root, outside = rag
    victim = _file(outside / "incoming" / "a.md")
    root.rmdir()
    root.symlink_to(outside)
    assert settle(str(root / "incoming" / "a.md"), "done", FAILURE["job_id"], root=root) is None
    assert victim.is_file() and _tree(outside) == ["incoming", "incoming/a.md"]


@pytest.mark.parametrize("path", [
    "{root}/incoming/../../outside/incoming/a.md",  # climbs out of the root
    "{root}/incoming/../incoming/a.md",  # stays inside, but '..' is refused whatever it resolves to
    "{outside}/incoming/a.md",  # not under the root at all
    "{root}2/incoming/a.md",  # a sibling whose name starts with the root's
    "rag/incoming/a.md",  # relative
    "{root}",  # the root itself
])
def test_a_source_path_not_plainly_under_the_root_is_refused(rag, path):
    root, outside = rag
    victim = _file(outside / "incoming" / "a.md", "victim\n")
    _file(root / "incoming" / "a.md")
    _file(root.parent / "rag2" / "incoming" / "a.md")
    before = _tree(root.parent)
    source = path.format(root=root, outside=outside)
    assert settle(source, "failed", FAILURE["job_id"], FAILURE, root=root) is None
    assert victim.read_text() == "victim\n" and _tree(root.parent) == before


def test_no_root_leaves_the_file_where_it_is(rag, caplog):
    root, _ = rag
    source = _file(root / "incoming" / "a.md")
    with caplog.at_level(logging.WARNING, logger="ingestion_pipeline.queues.settling"):
        assert settle(str(source), "done", FAILURE["job_id"], root=None) is None
    assert source.is_file() and "stays" in caplog.text


def test_a_missing_folder_means_the_file_has_gone(rag):
    root, _ = rag
    assert settle(str(root / "gone" / "incoming" / "a.md"), "done", FAILURE["job_id"], root=root) is None
    assert _tree(root) == []


def test_the_normal_case_moves_the_file_and_writes_the_record(rag):
    root, _ = rag
    source = _file(root / "team" / "incoming" / "a.md")
    moved = settle(str(source), "failed", FAILURE["job_id"], FAILURE, root=root)
    assert moved == root / "team" / "failed" / "a.md" and moved.read_text() == "# A\n" and not source.exists()
    assert json.loads((root / "team" / "failed" / "a.md.error.json").read_text()) == FAILURE
    done = _file(root / "team" / "incoming" / "b.md")
    assert settle(str(done), "done", "rag-kb1-1-0000000b", root=root) == root / "team" / "processed" / "b.md"
    outside_incoming = _file(root / "loose.md")  # not in an incoming folder: beside it
    assert settle(str(outside_incoming), "done", "rag-kb1-1-0000000c", root=root) == root / "processed" / "loose.md"


def test_a_root_called_incoming_keeps_the_destination_inside_it(tmp_path):
    root = tmp_path / "incoming"
    source = _file(root / "a.md")
    assert settle(str(source), "done", FAILURE["job_id"], root=root) == root / "processed" / "a.md"
    assert not (tmp_path / "processed").exists()


def test_a_folder_planted_where_the_record_goes_fails_that_job_only(rag, caplog):
    """A tenant may create anything in its own folder: a folder named like the failure record made the write
    raise out of the round, and every tenant's statuses waited."""
    root, _ = rag
    source = _file(root / "team" / "incoming" / "a.md")
    (root / "team" / "failed" / "a.md.error.json").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        assert settle(str(source), "failed", FAILURE["job_id"], FAILURE, root=root) is None
    assert "could not be settled" in caplog.text
