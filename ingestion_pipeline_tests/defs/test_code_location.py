"""The code location: what it holds, and what loading it costs a process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

import ingestion_pipeline.definitions as code_location
from ingestion_pipeline.defs.s3_resource import S3Resource


@pytest.fixture(autouse=True)
def development_machine(monkeypatch):
    """Loading the code location needs a database URL, or the embedded server allowed (as on a dev machine)."""
    monkeypatch.setenv("INGESTION_EMBEDDED_POSTGRES", "1")


def _contents(definitions: dg.Definitions) -> dict[str, list[str]]:
    repository = definitions.get_repository_def()
    graph = repository.asset_graph
    return {
        "assets": sorted(key.to_user_string() for key in graph.get_all_asset_keys()),
        "checks": sorted(key.to_user_string() for key in graph.asset_check_keys),
        "jobs": sorted(job.name for job in repository.get_all_jobs()),
        "sensors": sorted(sensor.name for sensor in repository.sensor_defs),
        "schedules": sorted(schedule.name for schedule in repository.schedule_defs),
        "resources": sorted(repository.get_top_level_resources()),
    }


def test_the_code_location_holds_every_module_of_defs_through_dagsters_own_loader():
    """``dg.load_from_defs_folder`` finds each module's ``@dg.definitions``; a module it missed shows here."""
    assert _contents(code_location.defs()) == {
        "assets": ["document_chunks", "document_elements", "document_embeddings", "promoted_documents",
                   "promoted_metrics", "raw_documents", "raw_metric_files", "staged_metric_rows"],
        "checks": ["promoted_documents:embeddings_match_chunks", "promoted_documents:fingerprints_current",
                   "promoted_documents:no_failed_files", "promoted_documents:no_version_without_chunks",
                   "promoted_documents:one_active_version_per_document", "raw_documents:queue_dead_letters_empty",
                   "staged_metric_rows:valid_row_threshold"],
        "jobs": ["__ASSET_JOB", "document_batch_job", "fingerprint_check_job", "ledger_janitor_job",
                 "metric_upload_job", "partition_pruning_job", "queue_check_job", "raw_file_retention_job",
                 "staging_cleanup_job"],
        "sensors": ["fingerprint_sensor", "ledger_on_run_canceled", "ledger_on_run_failure",
                    "metric_upload_sensor", "redis_queue_sensor", "s3_sensor", "sqs_sensor", "upload_sensor"],
        "schedules": ["partition_pruning_job_schedule", "raw_file_retention_job_schedule",
                      "staging_cleanup_job_schedule"],
        "resources": ["embedder", "heartbeat", "postgres", "s3", "settings", "step_values", "upload_store"],
    }
    assert isinstance(code_location.defs().executor, dg.ExecutorDefinition)


# The code location's whole snapshot, as Dagster serialises it for the UI and the daemon (every job's ops and
# dependencies, config schemas, executor, resources, tags, checks, sensors), with each list put in one order:
# Dagster builds some of them from sets.
SNAPSHOT = """
import hashlib, json
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster_shared.serdes import serialize_value
from ingestion_pipeline.definitions import defs

def canonical(value):
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value

snapshot = json.loads(serialize_value(RepositorySnap.from_def(defs().get_repository_def())))
print(hashlib.sha256(json.dumps(canonical(snapshot), sort_keys=True).encode()).hexdigest())
"""


@pytest.mark.integration  # three code locations loaded in processes of their own (~10 s)
def test_the_definitions_are_the_same_whatever_the_environment():
    """Every host defines the same code location, whatever executes its runs: the executor (in one process or on
    Celery workers) is read when a run starts, the document steps are the same graphs either way (whether their
    items spread over workers is the run's), and queues and the model are read when a run or tick needs them.
    Each load is a process of its own: the definitions are built when their modules are imported."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("INGESTION_")} | {
        "INGESTION_EMBEDDED_POSTGRES": "1"}
    settings = [{}, {"INGESTION_EXECUTOR": "in_process"},
                {"INGESTION_EXECUTOR": "celery", "INGESTION_EMBEDDING_QUEUE": "gpu",
                 "INGESTION_EMBEDDING_PRECISION": "int8", "INGESTION_SQS_QUEUE_URLS":
                 "https://sqs.us-east-1.amazonaws.com/123456789012/ingest-events, "
                 "http://127.0.0.1:9324/000000000000/Jobs.fifo"}]
    snapshots = {json.dumps(extra): subprocess.run([sys.executable, "-c", SNAPSHOT], env=base | extra, check=True,
                                                   capture_output=True, text=True).stdout.strip().splitlines()[-1]
                 for extra in settings}
    assert len(set(snapshots.values())) == 1, snapshots
    assert "sqs_sensor" in _contents(code_location.defs())["sensors"]


# The one module that uses Dagster beyond its documented API (ARCHITECTURE.md), each use tested on its own by
# runtime/test_dagster_internals.py (and by make test-dagster-next against the newest Dagster 1.13).
ALLOWED_INTERNALS = "runtime/dagster_internals.py"


def test_the_code_location_uses_no_dagster_internal():
    """Only Dagster's public API: no ``dagster._…`` module or ``dagster.components.definitions`` import anywhere in
    the package but the measured exception, in one module and tested for the upgrade that breaks it."""
    import ast

    package = Path(code_location.__file__).parent
    internal = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            internal += [f"{path.relative_to(package)}: {n}" for n in names
                         if n.startswith(("dagster._", "dagster_postgres._")) or n == "dagster.components.definitions"]
    assert sorted(i for i in internal if not i.startswith(f"{ALLOWED_INTERNALS}: ")) == []
    assert any(i.startswith(ALLOWED_INTERNALS) for i in internal)  # the checker sees the adapter's own


def test_loading_the_code_location_builds_no_s3_session_or_client():
    """Loading imports no dagster-aws (with it, loading took 2.5-3.0 s instead of 1.8-1.9), no pandas (the read
    API's, 0.3 s; a metrics upload's summary imports it when it runs) and builds no boto3 session, whose service
    models take 60-170 ms to load: one is built only when a file does come from S3."""
    code = ("import sys, ingestion_pipeline.definitions as d; d.defs().get_repository_def(); "
            "from ingestion_pipeline.core import s3_clients; "
            "print(any(m.split('.')[0] == 'dagster_aws' for m in sys.modules), 'boto3' in sys.modules, "
            "'pandas' in sys.modules, len(s3_clients._SESSIONS))")
    import os

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "INGESTION_EMBEDDED_POSTGRES": "1"})
    assert done.stdout.strip() == "False False False 0"


def test_the_code_location_loads_in_a_plain_shell_and_a_run_without_a_database_says_what_to_set(tmp_path):
    """Loading defines only: no DATABASE_URL, no embedded server, nothing written under the data folder. A
    deployed process without DATABASE_URL then fails where it needs the database, with what to set, rather than
    starting an embedded Postgres in its container."""
    import os

    data = tmp_path / "data"
    code = ("import dagster as dg, ingestion_pipeline.definitions as d; r = d.defs().get_repository_def(); "
            "print(len(r.asset_graph.get_all_asset_keys()));"
            "from ingestion_pipeline.defs.resources import PostgresResource\n"
            "try:\n with dg.build_resources({'postgres': PostgresResource()}): pass\n"
            "except Exception as exc: print(repr(exc.__cause__ or exc).replace(chr(10), ' '))")
    base = {k: v for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "DAGSTER_PG_URL", "INGESTION_EMBEDDED_POSTGRES",
                         "DAGSTER_IS_DEFS_VALIDATION_CLI")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**base, "INGESTION_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr[-3000:]
    assets, refused = done.stdout.strip().splitlines()[:2]
    assert int(assets) == 8
    assert "DATABASE_URL is not set" in refused and "DAGSTER_PG_URL" in refused
    assert not data.exists() or not any(data.rglob("*"))


@pytest.mark.parametrize("unsigned", [False, True])
def test_an_s3_client_is_configured_from_the_resource(unsigned):
    from botocore import UNSIGNED

    client = S3Resource(endpoint_url="http://127.0.0.1:9", region_name="eu-west-3", max_attempts=2,
                        use_unsigned_session=unsigned, aws_access_key_id="key",
                        aws_secret_access_key="secret").get_client()
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "eu-west-3"
    assert client.meta.config.retries == {"total_max_attempts": 3, "mode": "standard"}  # botocore: 2 retries
    assert (client.meta.config.signature_version is UNSIGNED) is unsigned
    assert client.meta.service_model.service_name == "s3"


def test_clients_share_one_boto3_session_per_aws_environment(monkeypatch):
    """A session loads botocore's service models (60-170 ms); its next clients take milliseconds. The AWS
    environment is part of the session's key: a session keeps the credentials it resolved from it."""
    from ingestion_pipeline.core import s3_clients as s3_resource

    monkeypatch.setattr(s3_resource, "_SESSIONS", {})
    resource = S3Resource(endpoint_url="http://127.0.0.1:9", region_name="eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    one, two = resource.get_client(), resource.get_client()
    assert one is not two and len(s3_resource._SESSIONS) == 1
    assert one._request_signer._credentials.access_key == "first"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second")
    three = resource.get_client()
    assert len(s3_resource._SESSIONS) == 2
    assert three._request_signer._credentials.access_key == "second"


def test_the_s3_resource_takes_dagster_aws_config_and_every_client_retries_alike(monkeypatch):
    """One factory, one retry policy: the code location's resource (sensor, sync, fetch threads) takes the config
    of dagster-aws's ``S3Resource`` (the same keys), and the API's presigning clients retry as its clients do."""
    assert set(S3Resource.model_fields) == {
        "use_unsigned_session", "region_name", "endpoint_url", "max_attempts", "profile_name", "use_ssl", "verify",
        "aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
    from ingestion_pipeline.api.services import ApiServices

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    resource = S3Resource(endpoint_url="http://127.0.0.1:9", region_name="eu-west-3")
    assert not hasattr(resource, "get_object_to_set_on_execution_context")  # a step gets the resource itself
    from_resource = resource.get_client()
    from_api = ApiServices(None, None, None).s3_client("http://127.0.0.1:9")
    for client in (from_resource, from_api):
        # botocore counts the first call too: max_attempts 5 retries is total_max_attempts 6
        assert client.meta.config.retries == {"total_max_attempts": 6, "mode": "standard"}
        assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert S3Resource(max_attempts=2).get_client().meta.config.retries["total_max_attempts"] == 3


def test_fetch_threads_asking_at_once_get_one_client(monkeypatch):
    import threading
    import time

    from ingestion_pipeline.defs.resources import S3Clients

    built = []

    def slow_build(self):  # a build slow enough that every thread asks before the first returns
        built.append(self.endpoint_url)
        time.sleep(0.2)
        return object()

    monkeypatch.setattr(S3Resource, "get_client", slow_build)
    clients = S3Clients(S3Resource())
    got = []
    threads = [threading.Thread(target=lambda: got.append(clients("http://127.0.0.1:9"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["http://127.0.0.1:9"]
    assert len({id(client) for client in got}) == 1


def test_a_source_naming_the_resources_own_endpoint_shares_its_client(monkeypatch):
    from ingestion_pipeline.defs.resources import S3Clients

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    clients = S3Clients(S3Resource(endpoint_url="http://127.0.0.1:9", region_name="eu-west-3"))
    assert clients(None) is clients("http://127.0.0.1:9") is clients("")
    assert clients("http://127.0.0.1:10") is not clients(None)


def test_embedding_steps_share_a_pool_and_the_instance_limits_runs_with_dagsters_concurrency_settings():
    """The model's CPU is the scarce thing: `document_embeddings` declares the `embedding` pool, which has a limit
    (the UI's concurrency page shows it); the instance configures runs and pools under `concurrency:`, not the legacy
    run-coordinator module path."""
    import yaml

    from ingestion_pipeline.core.settings import instance_home

    graph = code_location.defs().get_repository_def().asset_graph
    pools = {key.to_user_string(): graph.get(key).pools for key in graph.get_all_asset_keys()}
    assert pools["document_embeddings"] == {"embedding"}
    assert all(not p for name, p in pools.items() if name != "document_embeddings")
    config = yaml.safe_load((instance_home() / "dagster.yaml").read_text())
    assert "run_coordinator" not in config
    assert config["concurrency"]["runs"]["max_concurrent_runs"] >= 1
    # the pool's limit: one step per run slot, so a run in one process never waits for one
    assert config["concurrency"]["pools"]["default_limit"] == config["concurrency"]["runs"]["max_concurrent_runs"]
    assert config["run_monitoring"]["free_slots_after_run_end_seconds"] > 0
    assert config["run_queue"]["dequeue_interval_seconds"] == 1


def test_each_resource_field_a_variable_sets_is_that_variables_envvar_and_runs_read_it(monkeypatch, tmp_path):
    """The UI shows a resource's configuration: a field a set variable configures is its ``dg.EnvVar`` (the
    name, never the value); an unset one shows the setting's own default where it is the same on every host, and
    stays empty where it depends on the host; either way the environment a run starts with decides."""
    from ingestion_pipeline.defs.resources import SettingsResource, default_resources

    monkeypatch.setenv("DATABASE_URL", "postgresql://ingestion:s3cret@db.example:5432/ingestion")
    monkeypatch.setenv("INGESTION_BATCH_MAX_FILES", "7")
    monkeypatch.setenv("INGESTION_UPLOAD_DIR", str(tmp_path / "docs"))
    monkeypatch.delenv("INGESTION_UPLOAD_STORE", raising=False)
    monkeypatch.delenv("INGESTION_CHUNK_MAX_TOKENS", raising=False)
    resources = default_resources()
    assert resources["postgres"].database_url == dg.EnvVar("DATABASE_URL")
    assert resources["heartbeat"].database_url == dg.EnvVar("DATABASE_URL")
    assert resources["settings"].batch_max_files == dg.EnvVar.int("INGESTION_BATCH_MAX_FILES")
    assert resources["settings"].chunk_max_tokens == 256 and resources["upload_store"].store_uri is None
    assert (resources["heartbeat"].lease_seconds, resources["embedder"].batch_size) == (900, 16)
    assert "s3cret" not in repr(resources["postgres"])

    monkeypatch.setenv("INGESTION_BATCH_MAX_FILES", "9")  # read when the run starts, not when the code loaded
    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "128")  # a field at its default yields to the variable
    with dg.build_resources({"settings": resources["settings"], "upload_store": resources["upload_store"]}) as built:
        assert built.settings.get().batch.max_files == 9 and built.settings.get().chunk.max_tokens == 128
        assert built.upload_store.documents().root == (tmp_path / "docs").resolve()
    with pytest.raises(ValueError, match="SettingsResource.batch_lanes must be at least 1, got 0"):
        SettingsResource(batch_lanes=0).get()
