"""Bearer tokens of the HTTP API: JWTs signed HS256 (PyJWT), verified without a database lookup.

Only HS256 is accepted: a token signed with another algorithm, or with ``alg: none``, is refused by
``jwt.decode(..., algorithms=["HS256"])`` before its claims are read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt

ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32
REQUIRED_CLAIMS = ("sub", "tenant_id", "role", "exp", "iat")


class InvalidToken(Exception):
    """The token is missing, malformed, forged, expired or lacks a claim (the message says which)."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: taken from the token only."""

    user_id: str
    tenant_id: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def check_secret(secret: str | None) -> str:
    if not secret or len(secret.encode()) < MIN_SECRET_BYTES:
        raise ValueError(f"JWT_SECRET must be set to at least {MIN_SECRET_BYTES} bytes "
                         "(or AUTH_ENABLED=false for local development on a loopback address)")
    return secret


def issue_token(principal: Principal, secret: str, *, expiry_seconds: int, now: float | None = None) -> str:
    issued = int(now if now is not None else time.time())
    claims = {"sub": principal.user_id, "tenant_id": principal.tenant_id, "role": principal.role,
              "iat": issued, "exp": issued + expiry_seconds}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(token: str, secret: str) -> Principal:
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"require": list(REQUIRED_CLAIMS)})
    except jwt.ExpiredSignatureError as exc:
        raise InvalidToken("the token has expired") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise InvalidToken(f"the token lacks the {exc.claim!r} claim") from exc
    except jwt.InvalidTokenError as exc:
        raise InvalidToken(f"the token is not valid ({exc})") from exc
    if claims["role"] not in ("admin", "user") or not isinstance(claims["tenant_id"], str):
        raise InvalidToken("the token's role or tenant is not valid")
    return Principal(user_id=str(claims["sub"]), tenant_id=claims["tenant_id"], role=claims["role"])
