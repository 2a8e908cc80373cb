"""People who call the HTTP API: one row in `users`, a bcrypt hash (cost 12), a role, a tenant.

bcrypt (the ``bcrypt`` package, the reference binding) is slow on purpose; an unknown email is checked
against a dummy hash so that it costs the same time as a wrong password and says the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache

import bcrypt
import psycopg

from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id

ROLES = ("admin", "user")
BCRYPT_COST = 12
MIN_PASSWORD_CHARS = 8
# ASCII whitespace only: the same rule in Python and in the OpenAPI schema's (ECMA) regular expression.
EMAIL_PATTERN = r"^[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,255}$"  # no spaces, no control characters
_EMAIL = re.compile(EMAIL_PATTERN)


@cache
def _dummy_hash() -> bytes:
    return bcrypt.hashpw(b"not a password anyone has", bcrypt.gensalt(BCRYPT_COST))


@dataclass(frozen=True)
class User:
    user_id: str
    tenant_id: str
    email: str
    role: str
    created_at: datetime
    disabled: bool

    def as_dict(self) -> dict:
        return {"user_id": self.user_id, "tenant_id": self.tenant_id, "email": self.email, "role": self.role,
                "created_at": self.created_at, "disabled": self.disabled}


_COLUMNS = "user_id::text AS user_id, tenant_id, email, role, created_at, disabled"


def hash_password(password: str) -> str:
    raw = password.encode()
    if len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(f"a password has at least {MIN_PASSWORD_CHARS} characters")
    if len(raw) > 72:  # bcrypt reads 72 bytes; a longer one would be silently cut
        raise ValueError("a password is at most 72 bytes")
    return bcrypt.hashpw(raw, bcrypt.gensalt(BCRYPT_COST)).decode()


def add_user(conn: psycopg.Connection, email: str, *, tenant_id: str, role: str, password: str) -> User:
    validate_tenant_id(tenant_id)
    email = email.strip()
    if not _EMAIL.fullmatch(email):
        raise ValueError(f"not an email address: {email!r}")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: admin or user")
    password_hash = hash_password(password)
    with conn.transaction():
        ensure_tenant(conn, tenant_id)
        try:
            row = conn.execute(
                f"""INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, %s, %s)
                    RETURNING {_COLUMNS}""",
                (tenant_id, email, password_hash, role),
            ).fetchone()
        except psycopg.errors.UniqueViolation as exc:  # in this tenant: addresses are unique per tenant only
            raise ValueError(f"a user with the email {email!r} already exists in this tenant") from exc
    return User(**row)


def list_users(conn: psycopg.Connection, *, tenant_id: str | None = None) -> list[User]:
    rows = conn.execute(
        f"""SELECT {_COLUMNS} FROM users WHERE (%(t)s::text IS NULL OR tenant_id = %(t)s) ORDER BY email""",
        {"t": tenant_id},
    ).fetchall()
    return [User(**r) for r in rows]


def is_active(conn: psycopg.Connection, user_id: str) -> bool:
    """Whether the user exists and is not disabled (a token of a disabled user stops working)."""
    row = conn.execute("SELECT NOT disabled AS active FROM users WHERE user_id::text = %s", (user_id,)).fetchone()
    return bool(row and row["active"])


def has_email(conn: psycopg.Connection, user_id: str, email: str) -> bool:
    """Whether ``email`` is this user's own (case-insensitively)."""
    return conn.execute("SELECT 1 FROM users WHERE user_id::text = %s AND lower(email) = lower(%s)",
                        (user_id, email.strip())).fetchone() is not None


def disable_user(conn: psycopg.Connection, email: str, *, tenant_id: str | None = None) -> User:
    """Disable by email; with ``tenant_id``, only a user of that tenant (another tenant's is not found). An
    address in several tenants needs the tenant (``ValueError``)."""
    if tenant_id is None:
        tenants = [r["tenant_id"] for r in conn.execute(
            "SELECT tenant_id FROM users WHERE lower(email) = lower(%s) ORDER BY tenant_id", (email.strip(),))]
        if len(tenants) > 1:
            raise ValueError(f"{email!r} is a user of several tenants ({', '.join(tenants)}): give the tenant")
    row = conn.execute(
        f"""UPDATE users SET disabled = true
             WHERE lower(email) = lower(%(e)s) AND (%(t)s::text IS NULL OR tenant_id = %(t)s)
            RETURNING {_COLUMNS}""",
        {"e": email.strip(), "t": tenant_id},
    ).fetchone()
    if row is None:
        raise LookupError(f"no user with the email {email!r}")
    return User(**row)


class TenantRequired(Exception):
    """The address and password sign in to users of several tenants: the login must name the tenant."""


def authenticate(conn: psycopg.Connection, email: str, password: str, *,
                 tenant_id: str | None = None) -> User | None:
    """The user whose address and password match, enabled (of ``tenant_id`` if given); None otherwise, in
    similar time. An address may exist in several tenants: the password picks the account, and if it matches
    in more than one, ``TenantRequired`` (only someone who knows the password learns that)."""
    return match_password(login_candidates(conn, email, tenant_id=tenant_id), password)


def login_candidates(conn: psycopg.Connection, email: str, *, tenant_id: str | None = None) -> list[dict]:
    """The accounts ``email`` may sign in to, with their hashes: read first, so that the slow hashing
    (``match_password``) holds no database connection."""
    return conn.execute(
        f"""SELECT {_COLUMNS}, password_hash FROM users
             WHERE lower(email) = lower(%s) AND (%s::text IS NULL OR tenant_id = %s) ORDER BY tenant_id""",
        (email.strip(), tenant_id, tenant_id),
    ).fetchall()


def match_password(rows: list[dict], password: str) -> User | None:
    """The enabled account of ``rows`` whose hash ``password`` matches (see ``authenticate``); no rows cost
    one dummy hash, so an unknown address takes as long as a wrong password."""
    matched = []
    for row in rows or [None]:
        candidate = row["password_hash"].encode() if row else _dummy_hash()
        try:
            matches = bcrypt.checkpw(password.encode()[:72], candidate)
        except ValueError:
            matches = False
        if row is not None and matches and not row["disabled"]:
            matched.append(row)
    if len(matched) > 1:
        raise TenantRequired("this address and password sign in to several tenants: give tenant_id")
    if not matched:
        return None
    return User(**{k: v for k, v in matched[0].items() if k != "password_hash"})
