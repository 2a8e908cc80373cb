"""Tokens and the users of a tenant."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from ingestion_pipeline.api.errors import ApiError, ErrorBody, not_found
from ingestion_pipeline.api.login_guard import LoginGuard, LoginRefused
from ingestion_pipeline.api.schemas import TokenRequest, TokenResponse, UserIn, UserOut
from ingestion_pipeline.api.security import Admin, Services
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core import login_failures, users
from ingestion_pipeline.core.access_tokens import Principal, issue_token

router = APIRouter(prefix="/v1", tags=["auth"])
REFUSAL_PAUSE_SECONDS = 1.0


async def sign_in(request: Request, services: ApiServices, email: str, password: str,
                  tenant_id: str | None) -> Principal:
    """The account ``email`` and ``password`` open (in ``tenant_id`` if given), throttled per address and per
    (address, account) pair (``api/login_guard.py``); an ``ApiError`` (401, 429, 400) otherwise. The token route
    and the web app's sign-in both come here."""
    if not services.api.auth_enabled:
        raise ApiError(400, "auth_disabled", "AUTH_ENABLED=false: no tokens are issued in development mode")
    guard: LoginGuard = request.app.state.login_guard
    # the connection's peer, or what a trusted proxy says it is (api/server.py), never a client's own claim
    address = request.client.host if request.client else "unknown"

    def check():
        with services.db.connection() as conn:  # read, and give the connection back before the slow hash
            # counted per login as asked (tenant, email), whatever it matches: the same email in another tenant,
            # whoever made it, is another login whose sign-ins forgive nothing of this one's failures. Checked
            # before the accounts are looked up: a refused flood costs one query a try
            accounts = login_failures.accounts(email, tenant_id)
            guard.check(conn, address, accounts)
            rows = users.login_candidates(conn, email, tenant_id=tenant_id)
        user = guard.hash(users.match_password, rows, password, address=address)
        with services.db.connection() as conn:
            guard.record(conn, address, accounts, succeeded=user is not None,
                         forgive=login_failures.forgiven_by(rows, accounts) if user else None)
        return user

    try:
        user = await run_in_threadpool(check)
    except LoginRefused as exc:
        # answered after a pause on the event loop: refusals sent at once become a flood of their own
        await asyncio.sleep(REFUSAL_PAUSE_SECONDS)
        raise ApiError(429, "too_many_logins", str(exc), {"Retry-After": str(exc.retry_after)}) from exc
    except users.TenantRequired as exc:
        raise ApiError(400, "tenant_required", str(exc)) from exc
    if user is None:
        raise ApiError(401, "invalid_credentials", "wrong email or password", {"WWW-Authenticate": "Bearer"})
    return Principal(user.user_id, user.tenant_id, user.role)


@router.post("/auth/token", response_model=TokenResponse, responses={
    401: {"description": "bad credentials"},
    429: {"model": ErrorBody, "description": "too many failed logins from this address, or from it for this "
                                             "account, or too many at once: wait `Retry-After` seconds"},
    400: {"model": ErrorBody, "description": "the pair signs in to several tenants: give tenant_id"}})
async def token(body: TokenRequest, request: Request, services: Services) -> dict:
    """Exchange email and password for a bearer token. A wrong password and an unknown email get the same
    answer in similar time. Failed logins are throttled per address and per (address, account) pair
    (``api/login_guard.py``)."""
    who = await sign_in(request, services, body.email, body.password, body.tenant_id)
    expiry = services.api.jwt_expiry_seconds
    access = issue_token(who, services.api.jwt_secret or "",
                         expiry_seconds=expiry)
    return {"access_token": access, "token_type": "bearer", "expires_in": expiry}


@router.get("/users", response_model=list[UserOut], tags=["users"])
def list_users(who: Admin, services: Services) -> list[dict]:
    with services.db.connection() as conn:
        return [u.as_dict() for u in users.list_users(conn, tenant_id=who.tenant_id)]


@router.post("/users", response_model=UserOut, status_code=201, tags=["users"],
             responses={409: {"description": "the email is taken"}})
def add_user(body: UserIn, who: Admin, services: Services) -> dict:
    """Add a user to the caller's tenant."""
    with services.db.connection() as conn:
        try:
            return users.add_user(conn, body.email, tenant_id=who.tenant_id, role=body.role,
                                  password=body.password).as_dict()
        except ValueError as exc:
            if "already exists" in str(exc):
                raise ApiError(409, "conflict", str(exc)) from exc
            raise


@router.post("/users/{email}/disable", response_model=UserOut, tags=["users"],
             responses={409: {"model": ErrorBody, "description": "an admin cannot disable itself"}})
def disable_user(email: str, who: Admin, services: Services) -> dict:
    """Disable a user of the caller's tenant; its tokens stop working within seconds. An admin cannot
    disable itself (another admin, or `ingestion-pipeline users disable`, can)."""
    with services.db.connection() as conn:
        if users.has_email(conn, who.user_id, email):
            raise ApiError(409, "cannot_disable_self", "an admin cannot disable itself: ask another admin")
        try:
            return users.disable_user(conn, email, tenant_id=who.tenant_id).as_dict()
        except LookupError as exc:
            raise not_found("user") from exc
