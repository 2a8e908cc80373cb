"""The HTTP API (FastAPI): the same library functions as the CLI, the tenant taken from a signed token."""
