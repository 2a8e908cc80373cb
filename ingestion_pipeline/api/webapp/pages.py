"""The web app's pages, under ``/app``: sign in, documents, upload, the live ingestion history, search, and the
inspector a citation opens. Pages are rendered here; what they do after loading (upload, live updates, search,
the inspector's boxes) their script (``static/app.js``) asks of the same ``/v1`` routes every client uses, signed
in by the session cookie (``api/web_session.py``). The tenant is always the session's, never the page's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ingestion_pipeline.api import web_session
from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.api.routes.auth import sign_in
from ingestion_pipeline.api.schemas import MAX_ID
from ingestion_pipeline.core.access_tokens import Principal
from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.listing import count_documents, list_documents

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(prefix="/app", include_in_schema=False)
PAGE_SIZE = 50
# no inline script or style, nothing from another origin: what a page runs is app.js from this server
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
SIGN_IN_FORM_BYTES = 4096


class SignInNeeded(Exception):
    """A page asked without a valid session: answered by a redirect to the sign-in page."""


def install(app) -> None:
    app.include_router(router)
    app.mount("/app/static", StaticFiles(directory=HERE / "static"), name="app-static")

    @app.exception_handler(SignInNeeded)
    async def _to_sign_in(request: Request, _exc: SignInNeeded) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/app/sign-in?next={quote(target, safe='')}", status_code=303)


def _services(request: Request):
    return request.app.state.services


def _viewer(request: Request) -> tuple[Principal, str]:
    """The signed-in principal and its session; a page without one goes to the sign-in page."""
    session = web_session.session_of(request)
    if session is None:
        raise SignInNeeded()
    api = _services(request).api
    try:
        who = web_session.principal_from_session(request, api, session)
    except ApiError as exc:
        raise SignInNeeded() from exc
    if api.auth_enabled and not _services(request).user_is_active(who.user_id):
        raise SignInNeeded()
    return who, session


def _security_headers(request: Request) -> dict[str, str]:
    """``SECURITY_HEADERS``, with the upload bucket's origin allowed to be sent to where presigned uploads go."""
    api = _services(request).api
    if not api.upload_bucket:
        return SECURITY_HEADERS
    endpoint = api.upload_s3_endpoint or "https://*.amazonaws.com"
    origin = "/".join(endpoint.split("/")[:3])
    policy = SECURITY_HEADERS["Content-Security-Policy"].replace("connect-src 'self'", f"connect-src 'self' {origin}")
    return {**SECURITY_HEADERS, "Content-Security-Policy": policy}


def _page(request: Request, template: str, context: dict, status_code: int = 200) -> HTMLResponse:
    who_session = context.pop("_viewer", None)
    if who_session is not None:
        who, session = who_session
        context.update(who=who, csrf=web_session.csrf_token(_services(request).api, session))
    response = templates.TemplateResponse(request, template, {"page": template.removesuffix(".html"), **context},
                                          status_code=status_code)
    response.headers.update(_security_headers(request))
    return response


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a page of the app only, never another site."""
    if target and target.startswith("/app/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/app/documents"


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/app/documents", status_code=303)


@router.get("/sign-in")
def sign_in_page(request: Request, next: str | None = None) -> HTMLResponse:  # noqa: A002 - the query's name
    return _page(request, "sign_in.html", {"next": _safe_next(next), "auth": _services(request).api.auth_enabled})


@router.post("/sign-in")
async def sign_in_form(request: Request) -> Response:
    """The sign-in form: the same checks and throttling as ``POST /v1/auth/token``; the token goes into the
    session cookie, never to the page."""
    if not _from_this_site(request):  # another site's form would sign the browser in to its attacker's account
        raise ApiError(403, "cross_site", "sign in from this site's own sign-in page")
    body = await request.body()
    if len(body) > SIGN_IN_FORM_BYTES:
        raise ApiError(413, "too_large", "the sign-in form is a few fields")
    form = {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace")).items()}
    services = _services(request)
    target = _safe_next(form.get("next"))
    tenant = (form.get("tenant_id") or "").strip() or None
    try:
        if services.api.auth_enabled:
            who = await sign_in(request, services, form.get("email", ""), form.get("password", ""), tenant)
        else:  # development mode, loopback only: the tenant named, as the API's ?tenant_id= does
            try:
                who = Principal("dev", validate_tenant_id(tenant or ""), "admin")
            except ValueError as exc:
                raise ApiError(400, "invalid_request", str(exc)) from exc
    except ApiError as exc:
        response = _page(request, "sign_in.html", {"next": target, "auth": services.api.auth_enabled,
                                                   "error": exc.message, "email": form.get("email", ""),
                                                   "tenant_id": tenant or ""}, status_code=exc.status)
        if exc.headers and "Retry-After" in exc.headers:
            response.headers["Retry-After"] = exc.headers["Retry-After"]
        return response
    response = RedirectResponse(target, status_code=303)
    web_session.open_session(response, request, services.api, who)
    return response


def _from_this_site(request: Request) -> bool:
    """Whether a form was posted from this site: the browser says so (``Sec-Fetch-Site``), or the ``Origin`` it
    sends is this server's. A client that sends neither (not a browser) is not a cross-site form."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    body = await request.body()
    form = {key: values[0] for key, values in parse_qs(body[:SIGN_IN_FORM_BYTES].decode("utf-8", "replace")).items()}
    session = web_session.session_of(request)
    if session is not None:  # a sign-out another site posts is refused: it would be a nuisance, not harmless
        try:
            web_session.principal_from_session(request, _services(request).api, session,
                                               form_token=form.get(web_session.CSRF_FIELD))
        except ApiError as exc:
            if exc.status != 401:  # an expired or broken session is simply cleared
                raise
    response = RedirectResponse("/app/sign-in", status_code=303)
    web_session.close_session(response)
    return response


@router.get("/documents")
def documents_page(request: Request,
                   search: Annotated[str | None, Query(max_length=200)] = None,
                   status: Annotated[str, Query(pattern="^(active|inactive|versioned)$")] = "versioned",
                   offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> HTMLResponse:
    viewer = _viewer(request)
    who = viewer[0]
    with _services(request).db.connection() as conn:
        rows = list_documents(conn, who.tenant_id, status=status, search=search or None, limit=PAGE_SIZE,
                              offset=offset)
        total = count_documents(conn, who.tenant_id, status=status, search=search or None)
    return _page(request, "documents.html", {"_viewer": viewer, "rows": rows, "total": total, "search": search or "",
                                             "status": status, "offset": offset, "page_size": PAGE_SIZE})


@router.get("/upload")
def upload_page(request: Request) -> HTMLResponse:
    return _page(request, "upload.html", {"_viewer": _viewer(request), "types": sorted(DOCUMENT_TYPES)})


@router.get("/files")
async def files_page(request: Request) -> HTMLResponse:
    viewer = _viewer(request)

    def read() -> list[dict]:
        with _services(request).db.connection() as conn:
            return file_ledger.list_files(conn, tenant_id=viewer[0].tenant_id, limit=PAGE_SIZE)

    return _page(request, "files.html", {"_viewer": viewer, "rows": await run_in_threadpool(read)})


SEARCH_FILTERS = ("type", "language", "source", "doc_id", "since", "until")


@router.get("/search")
def search_page(request: Request, q: Annotated[str, Query(max_length=1000)] = "") -> HTMLResponse:
    """The search page; its filters are sent as they were typed, and checked by ``GET /v1/search``."""
    filters = {name: request.query_params[name][:500] for name in SEARCH_FILTERS if request.query_params.get(name)}
    return _page(request, "search.html", {"_viewer": _viewer(request), "q": q, "filters": filters})


@router.get("/sources")
def sources_page(request: Request) -> HTMLResponse:
    return _page(request, "sources.html", {"_viewer": _viewer(request)})


@router.get("/evaluation")
def evaluation_page(request: Request) -> HTMLResponse:
    return _page(request, "evaluation.html", {"_viewer": _viewer(request)})


@router.get("/documents/{doc_id}")
def inspector_page(request: Request, doc_id: int,
                   version: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
                   page: Annotated[int | None, Query(ge=1, le=100_000)] = None,
                   chunk: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None) -> HTMLResponse:
    """The inspector: what it shows is fetched by the page's script, under the session's tenant."""
    if not 1 <= doc_id <= MAX_ID:
        raise ApiError(404, "not_found", "no document")
    return _page(request, "inspector.html", {"_viewer": _viewer(request), "doc_id": doc_id, "version": version or "",
                                             "start_page": page or "", "chunk": chunk or ""})
