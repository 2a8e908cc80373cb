"""Bad input and a missing Redis through the real `queue` commands: clear errors, nothing lost."""

from ingestion_pipeline.core.redis_server import free_port
from ingestion_pipeline_tests.cli.test_corpus_cli import run_cli


def test_queue_commands_say_what_is_wrong(database, project_dagster_home, tmp_path, monkeypatch):
    missing = run_cli("queue", "rag", "add", "kb1", "--tenant", "acme", "--root", str(tmp_path / "nope"), check=False)
    assert missing.returncode == 2 and "is not a folder" in missing.stderr
    bad = run_cli("queue", "rag", "add", "kb-1", "--tenant", "acme", "--root", str(tmp_path), check=False)
    assert bad.returncode == 2 and "invalid rag_id 'kb-1'" in bad.stderr

    no_queue = run_cli("queue", "status", check=False)  # REDIS_URL=none in tests
    assert no_queue.returncode == 2 and "set REDIS_URL" in no_queue.stderr

    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # set, and nothing answers
    down = run_cli("process")
    assert "warning: Redis at redis://127.0.0.1:" in down.stderr and "does not answer" in down.stderr
    assert "nothing queued" in down.stdout
