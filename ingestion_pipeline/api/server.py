"""``ingestion-pipeline serve``: check the security settings, then run the app on uvicorn."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import sys

from ingestion_pipeline.core.access_tokens import check_secret
from ingestion_pipeline.core.settings import ApiSettings


def check_startup(api: ApiSettings, host: str) -> None:
    """Refuse to start without a strong JWT secret, or in development mode on a non-loopback address."""
    if api.auth_enabled:
        check_secret(api.jwt_secret)
        return
    if not _is_loopback(host):
        raise ValueError(f"AUTH_ENABLED=false serves every tenant without a token: it binds only a loopback "
                         f"address (127.0.0.1, ::1, localhost), not {host!r}")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return message if message.startswith("{") else json.dumps({"event": "log", "message": message})


def uvicorn_config(app, host: str, port: int, api: ApiSettings):
    """How ``serve`` runs ``app``. X-Forwarded-For is believed only from ``INGESTION_API_TRUSTED_PROXIES``:
    uvicorn's own default believes it from 127.0.0.1 (and ``FORWARDED_ALLOW_IPS``), so a client on the host, or
    anything relaying through a local port, could claim any address and get a fresh failed-login count with
    each. With proxies named, the client is the rightmost address of the header that is not one of them."""
    import uvicorn

    from ingestion_pipeline.api.header_deadline import protocol_with_header_deadline

    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                          http=protocol_with_header_deadline(api.header_timeout_seconds),
                          proxy_headers=bool(api.trusted_proxies), forwarded_allow_ips=list(api.trusted_proxies))


def serve(host: str, port: int, *, url: str, settings, api: ApiSettings) -> None:
    import uvicorn

    from ingestion_pipeline.api.app import create_app
    from ingestion_pipeline.api.services import ApiServices
    from ingestion_pipeline.core.db import Database

    check_startup(api, host)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    api_log = logging.getLogger("ingestion_pipeline.api")
    api_log.addHandler(handler)
    api_log.setLevel(logging.INFO)
    api_log.propagate = False
    # A request waits at most 5 s for a connection: with the database down it gets a 503, not a hang.
    database = Database(url, max_size=8, name="api", timeout=5.0)
    services = ApiServices(database, settings, api)
    app = create_app(services, close_on_shutdown=True)
    print(f"API on http://{host}:{port} (docs at /docs){'' if api.auth_enabled else ' - AUTH DISABLED'}",
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn_config(app, host, port, api))
    # Ctrl-C is raised again once the server has shut down: as with uvicorn.run, a clean end
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # as uvicorn.run: the port could not be bound, or the app not started
        sys.exit(3)
