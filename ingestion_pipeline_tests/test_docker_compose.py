"""docker-compose.yml cannot be run here (no Docker engine), so its shape is checked instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ingestion_pipeline.cli import build_parser
from ingestion_pipeline.core import environment
from ingestion_pipeline.core.settings import project_root


def _compose() -> dict:
    return yaml.safe_load((project_root() / "docker-compose.yml").read_text())


def test_compose_is_the_distributed_topology():
    services = _compose()["services"]
    assert {"postgres", "minio", "redis", "code-server", "webserver", "daemon", "intake", "api", "worker"} <= set(
        services)
    assert "--appendonly" in services["redis"]["command"]
    # the sensors only plan: without the intake service no queue job or source change would arrive
    assert services["intake"]["command"] == ["ingestion-pipeline", "intake"]
    assert services["intake"]["environment"]["DAGSTER_HOME"]  # the janitor marks dead runs failed in Dagster
    for name in ("code-server", "daemon", "intake", "api", "worker"):
        env = services[name]["environment"]
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["INGESTION_UPLOAD_STORE"].startswith("s3://") and env["INGESTION_EXECUTOR"] == "celery", name
        assert env["INGESTION_UPLOAD_STORE_ENDPOINT_URL"] == "http://minio:9000", name
        # every process that checks a tenant's S3 location must know the project's own buckets
        assert env["INGESTION_UPLOAD_BUCKET"] == "ingestion-uploads", name
    api = services["api"]
    assert api["command"][:2] == ["ingestion-pipeline", "serve"]
    assert "JWT_SECRET" in api["environment"] and api["environment"]["INGESTION_UPLOAD_BUCKET"]
    # `--scale worker=N`: no fixed name and no host port, which two copies of one service could not share
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]
    assert services["worker"]["command"] == ["ingestion-pipeline", "worker"]
    # Dagster's services start through the CLI, which checks the databases first (exit 3 when they are not there)
    for name in ("code-server", "webserver", "daemon"):
        assert services[name]["command"][:2] == ["ingestion-pipeline", name], name
    buckets = services["create-buckets"]["command"][0]
    assert "local/ingestion-store" in buckets and "local/ingestion-uploads" in buckets
    assert all(port.startswith("127.0.0.1:") for s in services.values() for port in s.get("ports", []))


def test_no_volume_is_shared_between_services():
    services = _compose()["services"]
    users: dict[str, list[str]] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):  # a named volume (a bind mount of the checkout is read-only code)
                users.setdefault(source, []).append(name)
    assert {volume: names for volume, names in users.items() if len(names) > 1} == {}


def test_every_service_command_exists():
    services = _compose()["services"]
    for name, service in services.items():
        command = service.get("command")
        if not command or service.get("image", "").startswith(("pgvector/", "redis", "minio/")):
            continue
        if command[0] == "ingestion-pipeline":
            build_parser().parse_args(command[1:])  # the subcommand and its flags exist
        else:  # dagster's own executables: `--help` of the same subcommand succeeds
            executable = Path(sys.executable).parent / command[0]
            words = []  # the subcommand: the words before the first flag
            for word in command[1:]:
                if word.startswith("-"):
                    break
                words.append(word)
            run = subprocess.run([str(executable), *words, "--help"], capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, (name, run.stderr[-500:])


def test_every_environment_name_is_one_the_settings_read():
    """A typo in compose (INGESTION_UPLOAD_STOR) would be silently ignored by the container: every name set for a
    pipeline service is in core/environment.py (the source of docs/configuration.md) or one that boto3, Dagster
    or the image reads."""
    known = environment.names() | {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                   "HF_HUB_OFFLINE"}
    for name, service in _compose()["services"].items():
        if service.get("image") != "ingestion-pipeline:dev":
            continue
        unknown = set(service.get("environment", {})) - known
        assert not unknown, (name, unknown)


def test_compose_migrates_once_before_the_services_start():
    """Migrating is explicit: a `migrate` job runs `db migrate`; the services that use the schema wait for it."""
    services = yaml.safe_load((project_root() / "docker-compose.yml").read_text())["services"]
    command = services["migrate"]["command"]
    assert command[:3] == ["ingestion-pipeline", "db", "migrate"]
    build_parser().parse_args(command[1:])
    for name in ("code-server", "api"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name


def test_compose_records_the_model_decision_once_and_the_image_holds_the_export():
    """`model prepare` runs once, after migrating; everything that embeds waits for it. The image exports the
    model at build time, so no container exports or judges when it starts."""
    compose = _compose()
    services = compose["services"]
    assert services["prepare-model"]["command"] == ["ingestion-pipeline", "model", "prepare"]
    assert services["prepare-model"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    for name in ("code-server", "api", "worker"):
        assert services[name]["depends_on"]["prepare-model"] == {"condition": "service_completed_successfully"}
    build = compose["x-pipeline-image"]["build"]["dockerfile_inline"]
    assert "RUN ingestion-pipeline model export" in build and "INGESTION_MODEL_CACHE_DIR" in build
    build_parser().parse_args(["model", "export"])
