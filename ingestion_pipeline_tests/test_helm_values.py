"""deploy/helm/values.yaml cannot be installed here (no cluster): what it runs of ours is checked instead."""

from __future__ import annotations

import yaml

from ingestion_pipeline.cli import build_parser
from ingestion_pipeline.core import environment
from ingestion_pipeline.core.settings import project_root


def test_the_code_location_checks_the_databases_before_dagster_starts():
    values = yaml.safe_load((project_root() / "deploy" / "helm" / "values.yaml").read_text())
    [deployment] = values["dagster-user-deployments"]["deployments"]
    check, prepare = deployment["initContainers"]  # in order: the schema first, then the model decision
    assert check["command"] == ["ingestion-pipeline", "db", "check"]
    assert prepare["command"] == ["ingestion-pipeline", "model", "prepare"]
    image = deployment["image"]
    for init in (check, prepare):
        build_parser().parse_args(init["command"][1:])
        assert init["image"] == f"{image['repository']}:{image['tag']}"  # the same release as the code location
        assert init["envFrom"] == [{"secretRef": s} for s in deployment["envSecrets"]]
    assert {e["name"] for e in deployment["env"]} <= environment.names()


def test_the_run_queue_limits_are_the_instance_files():
    """The chart's run queue holds runs as `make dev` and docker-compose do (one per batch, fair shares …)."""
    values = yaml.safe_load((project_root() / "deploy" / "helm" / "values.yaml").read_text())
    instance = yaml.safe_load((project_root() / "dagster_home" / "dagster.yaml").read_text())
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    runs = instance["concurrency"]["runs"]
    assert queued["maxConcurrentRuns"] == runs["max_concurrent_runs"]
    assert queued["tagConcurrencyLimits"] == runs["tag_concurrency_limits"]
    pools = instance["concurrency"]["pools"]
    assert values["concurrency"]["pools"] == {"defaultLimit": pools["default_limit"],
                                              "granularity": pools["granularity"]}
