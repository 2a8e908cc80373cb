"""`users add|list|disable` and `serve`'s refusal to start unsafely."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from ingestion_pipeline.cli import main
from ingestion_pipeline.core import users


def test_users_add_list_disable(database, db, project_dagster_home, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a long password\n"))
    assert main(["users", "add", "Ops@Acme.example", "--tenant", "acme", "--role", "admin", "--password-stdin",
                 "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["tenant_id"] == "acme" and added["role"] == "admin"
    stored = db.execute("SELECT password_hash FROM users WHERE email = 'Ops@Acme.example'").fetchone()
    assert stored["password_hash"].startswith("$2b$12$")  # bcrypt, cost 12; never the password
    assert users.authenticate(db, "ops@acme.example", "a long password").user_id == added["user_id"]

    monkeypatch.setattr(sys, "stdin", io.StringIO("another password\n"))
    assert main(["users", "add", "ops@acme.example", "--tenant", "acme", "--role", "user",
                 "--password-stdin"]) == 2  # the email is taken in this tenant (case-insensitively)
    assert "already exists in this tenant" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("another password\n"))
    assert main(["users", "add", "ops@acme.example", "--tenant", "globex", "--role", "user",
                 "--password-stdin"]) == 0  # addresses are unique per tenant: another tenant may have it
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("short\n"))
    assert main(["users", "add", "x@acme.example", "--tenant", "acme", "--role", "user", "--password-stdin"]) == 2
    assert "at least 8" in capsys.readouterr().err

    assert main(["users", "list", "--tenant", "acme", "--json"]) == 0
    assert [json.loads(line)["email"] for line in capsys.readouterr().out.splitlines()] == ["Ops@Acme.example"]
    assert main(["users", "disable", "OPS@acme.example"]) == 2  # in two tenants: which one?
    assert "several tenants (acme, globex)" in capsys.readouterr().err
    assert main(["users", "disable", "OPS@acme.example", "--tenant", "acme"]) == 0
    assert users.authenticate(db, "ops@acme.example", "a long password") is None
    assert users.authenticate(db, "ops@acme.example", "another password").tenant_id == "globex"
    assert main(["users", "disable", "nobody@acme.example"]) == 2


def test_serve_refuses_to_start_without_a_secret_or_open_dev_mode(tmp_path):
    cli = str(Path(sys.executable).parent / "ingestion-pipeline")
    env = {"PATH": "/usr/bin:/bin", "INGESTION_DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://127.0.0.1:9/x"}
    no_secret = subprocess.run([cli, "serve"], env=env, capture_output=True, text=True, timeout=120)
    assert no_secret.returncode == 2 and "JWT_SECRET" in no_secret.stderr
    open_dev = subprocess.run([cli, "serve", "--host", "0.0.0.0"], env={**env, "AUTH_ENABLED": "false"},
                              capture_output=True, text=True, timeout=120)
    assert open_dev.returncode == 2 and "loopback" in open_dev.stderr
