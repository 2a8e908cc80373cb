"""What `submit` reads: a regular file, reached without a symbolic link anywhere on its path (unless
``--follow-symlinks``). Before, only the last component was checked (``submit linkdir/X11/rgb.txt`` with
``linkdir -> /etc`` was ingested) and a FIFO named ``.txt`` hung the command."""

import os
import subprocess

from ingestion_pipeline_tests.cli.test_corpus_cli import CLI, json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


def test_a_link_in_a_directory_of_the_path_is_refused(database, project_dagster_home, db, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "notes.txt").write_text("a note of ours")
    elsewhere = tmp_path / "elsewhere" / "config"
    elsewhere.mkdir(parents=True)
    (elsewhere / "secret.txt").write_text("not for the index")
    os.symlink(tmp_path / "elsewhere", tmp_path / "linkdir")  # like linkdir -> /etc
    os.symlink(tmp_path / "real", tmp_path / "ours")
    outside = run_cli("submit", "linkdir/config/secret.txt", "--tenant", "acme", "--json", check=False, cwd=tmp_path)
    [line] = json_lines(outside.stdout)
    assert outside.returncode == 1 and line["status"] == "rejected"
    assert line["reason"] == (f"linkdir is a symbolic link (to {tmp_path / 'elsewhere'}) on the way to secret.txt; "
                              "pass --follow-symlinks to read what it points to")
    absolute = run_cli("submit", str(tmp_path / "ours" / "notes.txt"), "--tenant", "acme", "--json", check=False)
    assert json_lines(absolute.stdout)[0]["status"] == "rejected"
    assert table(db, "SELECT * FROM ingestion_runs") == []
    followed = run_cli("submit", str(tmp_path / "ours" / "notes.txt"), "--tenant", "acme", "--follow-symlinks",
                       "--json")
    assert json_lines(followed.stdout)[0]["status"] == "queued"


def test_a_fifo_or_a_directory_is_refused_at_once(database, project_dagster_home, db, tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "folder.md").mkdir()
    for name, kind in (("pipe.txt", "a FIFO (named pipe)"), ("folder.md", "a directory")):
        result = subprocess.run(CLI + ["submit", str(tmp_path / name), "--tenant", "acme", "--json"],
                                capture_output=True, text=True, env=os.environ.copy(), timeout=120)
        [line] = json_lines(result.stdout)
        assert result.returncode == 1 and line["status"] == "rejected"
        assert line["reason"] == f"{name} is {kind}, not a regular file"
    metrics = subprocess.run(CLI + ["metrics", "submit", str(tmp_path / "pipe.txt"), "--workspace", "acme",
                                    "--json"], capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    assert "is a FIFO (named pipe), not a regular file" in metrics.stdout + metrics.stderr
    assert table(db, "SELECT * FROM ingestion_runs") == [] and table(db, "SELECT * FROM data_uploads") == []
