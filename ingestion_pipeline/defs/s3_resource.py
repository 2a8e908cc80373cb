"""The code location's ``s3`` resource: boto3 clients, configured as dagster-aws's ``S3Resource`` is.

Why not dagster-aws itself: importing ``dagster_aws.s3`` imports the whole package, whose ``__init__``
loads every dagster-aws component (Athena, Secrets Manager, ECR, …) and through them alembic and
Dagster's test utilities: 1.46 s of ``python -X importtime`` on this machine, paid by every process
that loads the code location (each CLI command, each run worker, each sensor tick's process) for the
one class we used. The client is boto3's, built as dagster-aws builds it (a session per profile,
standard retries, ``max_attempts`` 5, optional unsigned requests), and the fields keep dagster-aws's
names and defaults, so a configuration written for ``dagster_aws.s3.S3Resource`` works unchanged.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import dagster as dg
from pydantic import Field

# boto3 sessions, one per profile and AWS environment, shared by the process's clients. A new session
# loads botocore's service models again: 60-170 ms per client, paid by every fetch thread of every run
# (an S3-source batch built three at once); a client from a session that has loaded them takes ~4 ms.
# A session is not thread-safe, so clients are created under the lock; the clients themselves are.
_SESSIONS: dict[tuple, Any] = {}
_SESSIONS_LOCK = threading.Lock()


class S3Resource(dg.ConfigurableResource):
    """boto3 S3 clients; unset fields fall back to the standard AWS environment (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE`` …), as boto3 reads it.

    ``context.resources.s3`` is the resource itself, not a client (dagster-aws's puts a client there,
    ~0.2 s for every step that requires the resource): our steps build one only when a file does come
    from S3 (``S3Clients``, once per endpoint and step, from the process's boto3 session).
    """

    use_unsigned_session: bool = Field(default=False, description="Send requests unsigned (public buckets).")
    region_name: str | None = Field(default=None, description="The region of the S3 session.")
    endpoint_url: str | None = Field(default=None, description="A custom endpoint (MinIO, moto, …).")
    max_attempts: int = Field(default=5, ge=1, description="Retries of a request (botocore's max_attempts).")
    profile_name: str | None = Field(default=None, description="The AWS profile of the session.")
    use_ssl: bool = Field(default=True, description="Whether to use SSL.")
    verify: bool | None = Field(default=None, description="Whether to verify SSL certificates (default: yes).")
    aws_access_key_id: str | None = Field(default=None, description="The access key ID of the session.")
    aws_secret_access_key: str | None = Field(default=None, description="The secret access key of the session.")
    aws_session_token: str | None = Field(default=None, description="The session token of the session.")

    def get_client(self) -> Any:
        """A new boto3 S3 client for this configuration (boto3 is imported here, not by the code location)."""
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        config = Config(retries={"max_attempts": self.max_attempts, "mode": "standard"})
        if self.use_unsigned_session:
            config = config.merge(Config(signature_version=UNSIGNED))
        # the environment is part of the key: a session keeps the credentials it resolved from it
        key = (self.profile_name, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(key)
            if session is None:
                session = _SESSIONS[key] = boto3.session.Session(profile_name=self.profile_name)
            return session.client(
                "s3", region_name=self.region_name, use_ssl=self.use_ssl, verify=self.verify,
                endpoint_url=self.endpoint_url, aws_access_key_id=self.aws_access_key_id,
                aws_secret_access_key=self.aws_secret_access_key, aws_session_token=self.aws_session_token,
                config=config,
            )
