"""The catalog reads like a Dagster project's: each asset names its table and columns (which exist), has owners,
a description and a code reference; every schedule and sensor says what it does."""

import dagster as dg
import pytest

import ingestion_pipeline.definitions as code_location
from ingestion_pipeline_tests.helpers import table


@pytest.fixture(autouse=True)
def development_machine(monkeypatch):
    monkeypatch.setenv("INGESTION_EMBEDDED_POSTGRES", "1")


def test_every_asset_names_its_table_owners_and_code(db):
    repository = code_location.defs().get_repository_def()
    for key in repository.asset_graph.get_all_asset_keys():
        node = repository.asset_graph.get(key)
        name = key.to_user_string()
        assert node.description and node.owners == ["team:data-platform"], name
        assert node.metadata["dagster/code_references"].code_references, name
        table_name = node.metadata["dagster/table_name"]
        columns = {r["column_name"] for r in table(
            db, "SELECT column_name FROM information_schema.columns WHERE table_name = %s", table_name)}
        assert columns, f"{name}: no table {table_name}"
        declared = [c.name for c in node.metadata["dagster/column_schema"].schema.columns]
        assert set(declared) <= columns, f"{name}: {set(declared) - columns} not in {table_name}"


def test_every_schedule_and_sensor_says_what_it_does():
    repository = code_location.defs().get_repository_def()
    for definition in [*repository.sensor_defs, *repository.schedule_defs]:
        assert definition.description, definition.name
    assert isinstance(repository.get_job("document_batch_job"), dg.JobDefinition)
