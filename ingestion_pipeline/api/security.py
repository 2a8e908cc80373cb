"""Who is calling: the principal from the bearer token, or the web app's session cookie (``web_session.py``), or,
in development mode, a tenant parameter."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ingestion_pipeline.api import web_session
from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core.access_tokens import InvalidToken, Principal, verify_token
from ingestion_pipeline.core.tenants import validate_tenant_id

_bearer = HTTPBearer(auto_error=False, description="a token from POST /v1/auth/token")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def services(request: Request) -> ApiServices:
    return request.app.state.services


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    tenant_id: Annotated[str | None, Query(include_in_schema=False)] = None,
) -> Principal:
    api = services(request).api
    session = web_session.session_of(request)
    if credentials is None and session is not None:  # the web app's sign-in (api/web_session.py)
        who = web_session.principal_from_session(request, api, session)
        if api.auth_enabled and not services(request).user_is_active(who.user_id):
            raise ApiError(401, "account_disabled", "this session's user is disabled or removed", _CHALLENGE)
        return who
    if not api.auth_enabled:  # development mode: loopback only, tenant from the query string
        if not tenant_id:
            raise ApiError(401, "tenant_required", "AUTH_ENABLED=false: pass ?tenant_id=", _CHALLENGE)
        try:
            return Principal(user_id="dev", tenant_id=validate_tenant_id(tenant_id), role="admin")
        except ValueError as exc:
            raise ApiError(400, "invalid_request", str(exc)) from exc
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthenticated", "a bearer token is required", _CHALLENGE)
    try:
        who = verify_token(credentials.credentials, api.jwt_secret or "")
    except InvalidToken as exc:
        raise ApiError(401, "invalid_token", str(exc), _CHALLENGE) from exc
    if not services(request).user_is_active(who.user_id):
        raise ApiError(401, "account_disabled", "this token's user is disabled or removed", _CHALLENGE)
    return who


def still_signed_in(request: Request) -> bool:
    """Whether the request's token or session would still be accepted now (expired, a disabled or removed user):
    what a long-lived response (an event stream) checks as it goes."""
    api = services(request).api
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    session = web_session.session_of(request)
    try:
        if scheme.lower() == "bearer" and token.strip():
            who = verify_token(token.strip(), api.jwt_secret or "")
        elif session is not None:
            who = verify_token(session, web_session.signing_key(api))
        else:
            return not api.auth_enabled  # development mode's ?tenant_id=
    except InvalidToken:
        return False
    return not api.auth_enabled or services(request).user_is_active(who.user_id)


def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.is_admin:
        raise ApiError(403, "forbidden", "this action needs the admin role")
    return who


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
Services = Annotated[ApiServices, Depends(services)]
