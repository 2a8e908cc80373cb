"""The code location's ``s3`` resource: dagster-aws's S3 configuration (``ResourceWithS3Configuration``, the
fields its ``S3Resource`` has), as a plain ``ConfigurableResource``.

It adds what dagster-aws's lacks for a batch that fetches many objects on several threads: clients from one
boto3 session per process (``core/s3_clients.py``; a session per client cost 60-170 ms each), with the
retry policy every other part of the pipeline uses too.

A step gets the resource itself, not a client: dagster-aws's ``S3Resource`` attaches a client to every step
that requires it (~0.2 s each), and our steps build one only when a file does come from S3. Not subclassing
that class keeps Dagster's default (the resource is what a step receives) without overriding its hook.
"""

from __future__ import annotations

from typing import Any

from dagster_aws.s3.resources import ResourceWithS3Configuration

from ingestion_pipeline.core.s3_clients import S3ClientSettings, build_client


class S3Resource(ResourceWithS3Configuration):
    """boto3 S3 clients; unset fields fall back to the standard AWS environment (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE`` …), as boto3 reads it."""

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
