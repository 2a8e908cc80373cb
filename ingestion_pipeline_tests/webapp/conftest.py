"""The API's fixtures (two tenants, their users and tokens) for the web app's tests."""

from ingestion_pipeline_tests.api.conftest import api  # noqa: F401 - a fixture
