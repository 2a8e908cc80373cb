"""Names that reach keys, paths and SQL: one rule for tenant, workspace and source names.

An identifier is 1-63 characters of ``a-z 0-9 _ -`` starting with a letter or digit; the same
pattern is the CHECK constraint of the tables that store them (a test compares the two). Partition
keys are built from ``key_part`` pieces, so they stay readable and safe (``[a-z0-9_-]``).
"""

from __future__ import annotations

import re

IDENTIFIER_PATTERN = "^[a-z0-9][a-z0-9_-]{0,62}$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def validate_identifier(value: str, what: str) -> str:
    """Return ``value`` or raise ValueError naming ``what`` ("tenant id", "source name" …)."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ValueError(
            f"invalid {what} {value!r}: use 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
        )
    return value


def key_part(text: str, max_chars: int = 40) -> str:
    """``text`` lower-cased with every run of other characters turned into one '-', trimmed."""
    return _UNSAFE.sub("-", text.lower()).strip("-")[:max_chars]
