"""boto3 S3 clients for every part of the pipeline: one retry policy, one session per process and AWS environment.

The sensor, `sync`, the batch's fetch threads (through dagster-aws's ``S3Resource``, ``defs/s3_resource.py``)
and the HTTP API (presigned uploads) all build their clients here, so they retry alike: botocore's
``standard`` mode, ``max_attempts`` 5 unless configured, as dagster-aws configures it.

Sessions are kept per (profile, the process's ``AWS_*`` environment): a new session loads botocore's service models
again (paid by every fetch thread of every run), while a client from a session that has loaded them costs a small part
of that (benchmarks/s3_vs_upload.py times the S3 path). A session is not thread-safe, so clients are created under a
lock; the clients themselves are.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_ATTEMPTS = 5  # dagster-aws's default, and ours everywhere

_SESSIONS: dict[tuple, Any] = {}
_SESSIONS_LOCK = threading.Lock()


@dataclass(frozen=True)
class S3ClientSettings:
    """What a client is built from; unset fields fall back to the standard AWS environment, as boto3 reads it."""

    endpoint_url: str | None = None
    region_name: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    profile_name: str | None = None
    use_ssl: bool = True
    verify: bool | str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    use_unsigned_session: bool = False


def build_client(settings: S3ClientSettings) -> Any:
    """A new boto3 S3 client (SigV4: presigned URLs carry their expiry and sign the declared size and type)."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(retries={"max_attempts": settings.max_attempts, "mode": "standard"}, signature_version="s3v4")
    if settings.use_unsigned_session:
        config = config.merge(Config(signature_version=UNSIGNED))
    # the environment is part of the key: a session keeps the credentials it resolved from it
    key = (settings.profile_name, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = boto3.session.Session(profile_name=settings.profile_name)
        return session.client(
            "s3", region_name=settings.region_name, use_ssl=settings.use_ssl, verify=settings.verify,
            endpoint_url=settings.endpoint_url, aws_access_key_id=settings.aws_access_key_id,
            aws_secret_access_key=settings.aws_secret_access_key, aws_session_token=settings.aws_session_token,
            config=config,
        )


def build_sqs_client(max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Any:
    """A boto3 SQS client from the same sessions and retry policy (endpoint: boto3's ``AWS_ENDPOINT_URL_SQS``
    or ``AWS_ENDPOINT_URL``, as boto3 reads them)."""
    import boto3
    from botocore.config import Config

    key = (None, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = boto3.session.Session()
        return session.client("sqs", config=Config(retries={"max_attempts": max_attempts, "mode": "standard"}))


class ClientsByEndpoint:
    """endpoint URL -> client, each built once by ``build`` (None: the default endpoint); the fetch threads
    that ask at once get one client, not one each. A source may carry its own endpoint (MinIO, moto, …)."""

    def __init__(self, build: Callable[[str | None], Any]) -> None:
        self._build = build
        self._clients: dict[str | None, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, endpoint_url: str | None) -> Any:
        with self._lock:
            if endpoint_url not in self._clients:
                self._clients[endpoint_url] = self._build(endpoint_url)
            return self._clients[endpoint_url]
