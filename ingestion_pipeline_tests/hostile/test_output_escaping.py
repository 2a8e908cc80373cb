"""Names that come from users cannot drive the reader's terminal. Before, a file named with ESC sequences was
stored and printed raw by `runs`, and so was an e-mail by `users list`."""

import os
import subprocess

from ingestion_pipeline_tests.cli.test_corpus_cli import CLI, json_lines, run_cli

ESC = "\x1b"


def test_a_file_name_with_escape_sequences_prints_escaped(database, project_dagster_home, db, tmp_path):
    name = f"red{ESC}[31m{ESC}]0;pwned\x07\u202etxt.md"
    (tmp_path / name).write_text("# Note\n\nHello.\n")
    submitted = run_cli("submit", str(tmp_path / name), "--tenant", "acme")
    listed = run_cli("files", "--tenant", "acme")
    as_json = run_cli("files", "--tenant", "acme", "--json")
    for output in (submitted.stdout, listed.stdout, as_json.stdout):
        assert ESC not in output and "\x07" not in output and "\u202e" not in output
    assert "red\\u001b[31m\\u001b]0;pwned\\u0007\\u202etxt.md" in listed.stdout
    assert json_lines(as_json.stdout)[0]["config"]["filename"] == name  # JSON keeps the real name, escaped


def test_an_email_with_control_characters_is_refused(database, project_dagster_home):
    result = subprocess.run(CLI + ["users", "add", f"a{ESC}[2J@acme.example", "--tenant", "acme", "--role", "user",
                                   "--password-stdin"], input="a long enough password\n", capture_output=True,
                            text=True, env=os.environ.copy(), timeout=120)
    assert result.returncode == 2 and ESC not in result.stderr, result.stderr
    assert "not a valid e-mail" in result.stderr or "email" in result.stderr.lower()
