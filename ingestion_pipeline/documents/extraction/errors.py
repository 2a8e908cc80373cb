"""Errors a person can act on: the ledger stores ``str(error)`` verbatim."""


class ExtractionError(Exception):
    """The file cannot be turned into text; the message says why (password, corrupt, no text …)."""
