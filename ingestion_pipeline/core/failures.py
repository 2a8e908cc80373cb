"""Why a unit of work failed, and whether trying again can help.

Every failure becomes a ``FailureInfo``: a short stable ``code`` (``pdf_password_protected``,
``s3_precondition_failed``, ``threshold_missed``, ``lease_expired`` …), a message a person can act on,
whether it is *transient* (connection lost, serialization failure or deadlock, S3 throttling / 5xx /
timeouts, a worker out of memory: retried with backoff) or *permanent* (corrupt or unsupported
content, a validation threshold missed: failed at once), and a suggestion where one helps.

Errors raised on purpose carry their code (``CodedError``); anything else is classified by type.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailureInfo:
    code: str
    message: str
    transient: bool = False
    suggestion: str | None = None


class CodedError(Exception):
    """An error whose message is already what a person needs, with a stable code."""

    transient = False

    def __init__(self, code: str, message: str, *, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.suggestion = suggestion

    def info(self) -> FailureInfo:
        return FailureInfo(self.code, str(self), self.transient, self.suggestion)


class TransientError(CodedError):
    """A failure that trying again later can fix (the resource was unavailable, not the input wrong)."""

    transient = True


# botocore error codes (and HTTP statuses) that mean "S3 is busy or briefly unavailable"
_S3_TRANSIENT_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed", "InternalError",
    "ServiceUnavailable", "RequestLimitExceeded", "500", "502", "503", "504",
}


def _s3_failure(exc: Exception) -> FailureInfo | None:
    try:
        import botocore.exceptions as boto
    except ImportError:  # pragma: no cover - botocore ships with boto3
        return None
    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _S3_TRANSIENT_CODES or status >= 500:
            return FailureInfo("s3_unavailable", f"S3 is unavailable or throttling ({code or status}): {exc}", True)
        return FailureInfo("s3_error", f"S3 refused the request ({code or status}): {exc}")
    if isinstance(exc, boto.EndpointConnectionError | boto.ConnectTimeoutError | boto.ReadTimeoutError
                  | boto.ConnectionClosedError):
        return FailureInfo("s3_unavailable", f"S3 cannot be reached: {exc}", True)
    return None


def classify(exc: BaseException) -> FailureInfo:
    """The ``FailureInfo`` of an exception raised while working on one unit of work."""
    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, CodedError):
        return exc.info()
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return FailureInfo("db_conflict", f"the database aborted a conflicting transaction: {exc}", True)
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return FailureInfo("db_unavailable", f"the database is unavailable: {type(exc).__name__}: {exc}", True)
    if isinstance(exc, MemoryError):
        return FailureInfo("worker_out_of_memory", "the worker ran out of memory", True,
                           "retried with backoff; if it keeps failing the file is too large for this worker")
    if isinstance(exc, Exception):
        s3 = _s3_failure(exc)
        if s3 is not None:
            return s3
    return FailureInfo("unexpected_error", f"{type(exc).__name__}: {exc}", False,
                       "a bug or an unexpected input; `ingestion-pipeline retry` once it is fixed")


def is_transient(exc: BaseException) -> bool:
    return classify(exc).transient
