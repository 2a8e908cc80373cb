"""The code location's ``s3`` resource: the configuration fields of dagster-aws's ``S3Resource`` (the same names,
types, defaults and meanings, so run config and Helm values written for it hold), declared here as a plain
``ConfigurableResource``.

dagster-aws is not installed: its package ``__init__`` loads every dagster-aws component (Secrets Manager, ECS,
Redshift…) and Dagster's test utilities, and ``load_from_defs_folder`` imports every installed package's component
entry point, so with it the code location took clearly longer to load (a code server, `dg list defs`; an `ingest`
command, which imports much of the same Dagster anyway, less so) for ten field declarations (docs/benchmarks.md,
"What loading the code location costs"). The clients were never dagster-aws's anyway: they come from one boto3
session per process (``core/s3_clients.py``; a session per client cost far more), with the retry policy every other
part of the pipeline uses too.

A step gets the resource itself, not a client: dagster-aws's ``S3Resource`` attaches a client to every step that
requires it (a cost of each step: benchmarks/s3_vs_upload.py), and our steps build one only when a file does come
from S3.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from ingestion_pipeline.core.s3_clients import S3ClientSettings, build_client


class S3Resource(dg.ConfigurableResource):
    """boto3 S3 clients; unset fields fall back to the standard AWS environment (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE`` …), as boto3 reads it."""

    use_unsigned_session: bool = Field(default=False, description="Specifies whether to use an unsigned S3 session.")
    region_name: str | None = Field(default=None, description="Specifies a custom region for the S3 session.")
    endpoint_url: str | None = Field(default=None, description="Specifies a custom endpoint for the S3 session.")
    max_attempts: int = Field(default=5, description=(
        "This provides Boto3's retry handler with a value of maximum retry attempts, where the initial call "
        "counts toward the max_attempts value that you provide."))
    profile_name: str | None = Field(default=None, description="Specifies a profile to connect that session.")
    use_ssl: bool = Field(default=True, description="Whether or not to use SSL. By default, SSL is used.")
    verify: bool | None = Field(default=None, description=(
        "Whether or not to verify SSL certificates. By default SSL certificates are verified."))
    aws_access_key_id: str | None = Field(
        default=None, description="AWS access key ID to use when creating the boto3 session.")
    aws_secret_access_key: str | None = Field(
        default=None, description="AWS secret access key to use when creating the boto3 session.")
    aws_session_token: str | None = Field(
        default=None, description="AWS session token to use when creating the boto3 session.")

    def client_settings(self) -> S3ClientSettings:
        return S3ClientSettings(
            endpoint_url=self.endpoint_url, region_name=self.region_name, max_attempts=self.max_attempts,
            profile_name=self.profile_name, use_ssl=self.use_ssl, verify=self.verify,
            aws_access_key_id=self.aws_access_key_id, aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token, use_unsigned_session=self.use_unsigned_session,
        )

    def get_client(self) -> Any:
        """A new boto3 S3 client for this configuration, from the process's session."""
        return build_client(self.client_settings())
