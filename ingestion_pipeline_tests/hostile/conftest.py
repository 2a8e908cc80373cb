"""The hostile-input suite uses the API tests' fixtures (an app over the test database, tokens per tenant)."""

from ingestion_pipeline_tests.api.conftest import api  # noqa: F401 - a fixture, used by name
