"""Errors a person can act on: the ledger stores the message verbatim and the code beside it."""

from __future__ import annotations

from ingestion_pipeline.core.failures import CodedError


class ExtractionError(CodedError):
    """The file cannot be turned into text; the message says why (password, corrupt, no text …)."""

    def __init__(self, message: str, *, code: str = "extraction_failed", suggestion: str | None = None) -> None:
        super().__init__(code, message, suggestion=suggestion)
