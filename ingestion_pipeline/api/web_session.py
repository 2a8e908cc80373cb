"""The web app's sign-in: the same token ``POST /v1/auth/token`` issues, kept in an HttpOnly, SameSite=Strict
cookie, so the page's script never holds it; every ``/v1`` route accepts it as it accepts a bearer token.

A request that changes something and carries only the cookie must also carry ``X-CSRF-Token`` (or a form's
``csrf_token``): an HMAC of the session under the server's secret, which the server renders into its own pages.
Another site can make a browser send the cookie (SameSite aside) but cannot read the page to learn the token.
With ``AUTH_ENABLED=false`` (development, loopback) the session names a tenant, signed with a key of the process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache

from fastapi import Request, Response

from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.core.access_tokens import InvalidToken, Principal, issue_token, verify_token
from ingestion_pipeline.core.settings import ApiSettings

COOKIE = "ingestion_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@cache
def _process_key() -> str:
    return secrets.token_urlsafe(48)


def signing_key(api: ApiSettings) -> str:
    """What sessions are signed with: the deployment's JWT secret, or (auth off) a key of this process."""
    return api.jwt_secret if api.auth_enabled and api.jwt_secret else _process_key()


def csrf_token(api: ApiSettings, session: str) -> str:
    return hmac.new(signing_key(api).encode(), b"csrf\0" + session.encode(), hashlib.sha256).hexdigest()


def session_of(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def principal_from_session(request: Request, api: ApiSettings, session: str, *, form_token: str | None = None
                           ) -> Principal:
    """The session's principal; a request that changes something must show the session's CSRF token."""
    try:
        who = verify_token(session, signing_key(api))
    except InvalidToken as exc:
        raise ApiError(401, "invalid_session", f"sign in again ({exc})") from exc
    if request.method not in SAFE_METHODS:
        shown = request.headers.get(CSRF_HEADER) or form_token or ""
        if not hmac.compare_digest(shown, csrf_token(api, session)):
            raise ApiError(403, "csrf_failed", f"a request signed in by cookie must carry the page's {CSRF_HEADER}")
    return who


def open_session(response: Response, request: Request, api: ApiSettings, who: Principal) -> None:
    """Sign ``who`` in on this browser: the token in the cookie, for as long as a token lasts."""
    token = issue_token(who, signing_key(api), expiry_seconds=api.jwt_expiry_seconds)
    response.set_cookie(COOKIE, token, max_age=api.jwt_expiry_seconds, path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def close_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
