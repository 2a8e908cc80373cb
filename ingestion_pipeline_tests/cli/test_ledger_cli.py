"""The operator's commands through the real `ingestion-pipeline` executable: files show (with the
history of attempts), retry, cancel, pause / resume, and submit refusing a symbolic link."""

import os
import re
import subprocess
import sys

import pytest

from ingestion_pipeline_tests.cli.test_corpus_cli import CLI, json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


@pytest.mark.integration
def test_retry_cancel_pause_resume(database, project_dagster_home, db, corpus_dir, tmp_path):
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe meeting moved to Thursday.\n")
    locked = corpus_dir / "broken" / "password.pdf"

    # a permanent failure, shown with its code and its attempts; a replay runs it again
    [failed] = json_lines(run_cli("submit", str(locked), "--tenant", "acme", "--json").stdout)
    run_cli("process")
    assert failed["file_id"] == failed["run_id"]  # the old name of the field is still sent
    shown = json_lines(run_cli("files", "show", str(failed["file_id"]), "--json").stdout)[0]
    assert shown["file_id"] == failed["file_id"] == shown["run_id"]  # the old name is still sent here too
    assert (shown["status"], shown["error_code"]) == ("failed", "pdf_password_protected")
    assert [h["event"] for h in shown["history"]] == ["claimed", "failed"]
    text = run_cli("files", "show", str(failed["file_id"])).stdout
    assert "attempts:" in text and "pdf_password_protected" in text
    old_name = run_cli("runs", "show", str(failed["file_id"]))  # the command's old name works, and says so
    assert old_name.stdout == text and "`ingestion-pipeline runs` is now `ingestion-pipeline files`" in old_name.stderr
    [replayed] = json_lines(run_cli("retry", str(failed["file_id"]), "--by", "ops", "--json").stdout)
    assert replayed == {"kind": "document", "id": failed["file_id"], "outcome": "queued"}
    run_cli("process")
    row = table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s", failed["file_id"])[0]
    assert (row["status"], row["attempts"]) == ("failed", 2)
    again = run_cli("retry", "--failed", "--since", "1h", "--tenant", "acme", "--json")
    assert json_lines(again.stdout)[0]["outcome"] == "queued"
    nothing = run_cli("retry", "999999", check=False)
    assert nothing.returncode == 1 and "not found" in nothing.stdout

    # a paused tenant's work waits (the replayed file and a new one); canceled work never runs
    assert "tenant acme paused" in run_cli("pause", "--tenant", "acme").stdout
    [queued] = json_lines(run_cli("submit", str(note), "--tenant", "acme", "--json").stdout)
    assert "nothing queued" in run_cli("process").stdout
    assert table(db, "SELECT status FROM ingestion_runs WHERE file_id = %s", queued["file_id"])[0]["status"] == "queued"
    run_cli("cancel", str(failed["file_id"]), "--by", "ops")
    row = table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s", failed["file_id"])[0]
    assert (row["status"], row["canceled_by"], row["attempts"]) == ("canceled", "ops", 2)

    # resumed, the new file runs; the canceled one does not
    run_cli("resume", "--tenant", "acme")
    run_cli("process")
    statuses = {r["file_id"]: r["status"] for r in table(db, "SELECT file_id, status FROM ingestion_runs")}
    assert statuses == {failed["file_id"]: "canceled", queued["file_id"]: "succeeded"}
    done = run_cli("cancel", str(queued["file_id"]), check=False)
    assert done.returncode == 1 and "already succeeded" in done.stdout
    canceled = json_lines(run_cli("files", "--status", "canceled", "--json").stdout)
    assert [r["file_id"] for r in canceled] == [failed["file_id"]]


def test_submit_refuses_symbolic_links(database, project_dagster_home, db, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the real file")
    link = tmp_path / "x.txt"
    os.symlink("/etc/passwd", link)
    result = run_cli("submit", str(link), "--tenant", "acme", "--json", check=False)
    [line] = json_lines(result.stdout)
    assert result.returncode == 1 and line["status"] == "rejected"
    assert line["reason"] == ("x.txt is a symbolic link (to /etc/passwd); pass --follow-symlinks to read what it "
                              "points to")
    assert table(db, "SELECT * FROM ingestion_runs") == []
    own = tmp_path / "own.txt"
    os.symlink(secret, own)
    [followed] = json_lines(run_cli("submit", str(own), "--tenant", "acme", "--follow-symlinks", "--json").stdout)
    assert followed["status"] == "queued"


def test_submit_queues_without_importing_dagster(database, project_dagster_home, db, tmp_path):
    """A submit needs the pipeline fingerprint (the model's files), not Dagster: importing it cost 1.2 s
    of a 3.2 s one-file submit."""
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nSubmitted alone.\n")
    command = [sys.executable, "-X", "importtime", *CLI, "submit", str(note), "--tenant", "acme", "--json"]
    result = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=300, check=True)
    assert json_lines(result.stdout)[0]["status"] == "queued"
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "ingestion_pipeline.documents.embedding" in imported  # the fingerprint was computed here
    assert "dagster" not in imported


def test_unreachable_database_is_a_clear_error(tmp_path):
    import socket
    import subprocess

    from ingestion_pipeline_tests.cli.test_corpus_cli import CLI

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": f"postgresql://nobody@127.0.0.1:{port}/nothing?connect_timeout=2"}
    result = subprocess.run(CLI + ["files"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("error: the database is unavailable") and "Traceback" not in result.stderr


@pytest.mark.integration
def test_files_show_tells_how_far_a_big_pdf_is_and_who_reads_its_units(database, project_dagster_home, db,
                                                                          corpus_dir):
    from ingestion_pipeline.documents import staging, units
    from ingestion_pipeline.documents.extraction.elements import PdfPages

    [row] = json_lines(run_cli("submit", str(corpus_dir / "documents" / "fr_olap.pdf"), "--tenant", "acme",
                               "--json").stdout)
    file_id = row["file_id"]
    db.execute("UPDATE ingestion_runs SET status = 'running' WHERE file_id = %s", (file_id,))
    plan = units.plan_units(12, 4)
    with database.transaction() as conn:
        staging.ensure_staging_row(conn, file_id, "acme")
        units.plan(conn, file_id, "sha", plan)
        units.finish(conn, file_id, plan[0], PdfPages(1, 4, []), done_by="worker1:10", extract_ms=900)
        assert units.take(conn, file_id, 1, "worker2:20:1") == "taken"
    text = run_cli("files", "show", str(file_id)).stdout
    assert "units: 1/3 read, pages 4/12" in text, text
    # the lease's age: the seconds since it was taken (a loaded machine takes one or two to run the command)
    assert re.search(r"unit 1 \(pages 5-8\) read by worker2:20:1, lease renewed \d+ s ago", text), text
    shown = json_lines(run_cli("files", "show", str(file_id), "--json").stdout)[0]
    assert [(r["unit"], r["reader"]) for r in shown["units"]["reading"]] == [(1, "worker2:20:1")]


@pytest.mark.integration
def test_files_show_tells_how_many_parts_of_a_big_document_are_chunked_and_by_whom(database, project_dagster_home,
                                                                                    db, corpus_dir):
    [row] = json_lines(run_cli("submit", str(corpus_dir / "documents" / "fake-memo.pdf"), "--tenant", "acme",
                               "--json").stdout)
    file_id = row["file_id"]
    db.execute("UPDATE ingestion_runs SET status = 'running' WHERE file_id = %s", (file_id,))
    db.execute("INSERT INTO staging_documents (file_id, tenant_id) VALUES (%s, 'acme')", (file_id,))
    for number, keys, done_by in ((0, ["a", "b"], "worker1:10"), (1, ["c"], None), (2, ["d", "e", "f"], "worker2:7")):
        db.execute("""INSERT INTO staging_chunk_parts (file_id, part_number, section_keys, section_bounds, state,
                                                       done_by)
                      VALUES (%s, %s, %s, %s, %s, %s)""",
                   (file_id, number, keys, list(range(2 * len(keys))), "done" if done_by else "pending", done_by))
    text = run_cli("files", "show", str(file_id)).stdout
    assert "chunk parts: 2/3 chunked, sections 5/6 (by worker1:10, worker2:7)" in text, text
    shown = json_lines(run_cli("files", "show", str(file_id), "--json").stdout)[0]
    assert (shown["chunk_parts"]["parts_done"], shown["chunk_parts"]["parts_total"]) == (2, 3)
