"""docker-compose.yml cannot be run here (no Docker engine), so its shape is checked instead."""

from __future__ import annotations

import yaml

from ingestion_pipeline.cli import build_parser
from ingestion_pipeline.core.settings import project_root


def test_compose_runs_the_api_and_shares_the_data_volume():
    compose = yaml.safe_load((project_root() / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "minio", "redis", "code-server", "webserver", "daemon", "api"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    assert services["code-server"]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    api = services["api"]
    command = api["command"]
    assert command[:2] == ["ingestion-pipeline", "serve"]
    build_parser().parse_args(command[1:])  # the flags exist
    assert "JWT_SECRET" in api["environment"] and api["environment"]["INGESTION_UPLOAD_BUCKET"]
    # whoever writes raw bytes (api) and whoever reads them (code server runs, daemon) share one volume
    for name in ("api", "code-server", "daemon"):
        assert "data:/data" in services[name]["volumes"], name
        assert services[name]["environment"]["INGESTION_DATA_DIR"] == "/data"
    assert all(port.startswith("127.0.0.1:") for s in services.values() for port in s.get("ports", []))


def test_compose_migrates_once_before_the_services_start():
    """Migrating is explicit: a `migrate` job runs `db migrate`; the services that use the schema wait for it."""
    services = yaml.safe_load((project_root() / "docker-compose.yml").read_text())["services"]
    command = services["migrate"]["command"]
    assert command[:3] == ["ingestion-pipeline", "db", "migrate"]
    build_parser().parse_args(command[1:])
    for name in ("code-server", "api"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
