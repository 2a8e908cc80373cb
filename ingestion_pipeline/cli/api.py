"""`serve` (the HTTP API) and `users add|list|disable` (who may call it)."""

from __future__ import annotations

import argparse
import getpass
import sys

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_rows


def cmd_serve(args: argparse.Namespace) -> int:
    from ingestion_pipeline.api.server import check_startup, serve
    from ingestion_pipeline.core.settings import load_api_settings

    api = load_api_settings()
    check_startup(api, args.host)  # before anything starts: a bad configuration is exit code 2
    ctx = bootstrap()
    ctx.db.close()  # the server opens its own pool
    serve(args.host, args.port, url=ctx.url, settings=ctx.settings, api=api)
    return 0


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise ValueError("the two passwords differ")
    if not password:
        raise ValueError("the password is empty")
    return password


def cmd_users(args: argparse.Namespace) -> int:
    from ingestion_pipeline.core import users

    if args.users_command == "add":
        password = _read_password(args)
        with bootstrap() as ctx, ctx.db.connection() as conn:
            user = users.add_user(conn, args.email, tenant_id=args.tenant, role=args.role, password=password)
        emit(args, [user.as_dict()], lambda r: print(f"added {user.email} ({user.role}) to tenant {user.tenant_id}"))
    elif args.users_command == "list":
        with bootstrap() as ctx, ctx.db.connection() as conn:
            rows = [u.as_dict() for u in users.list_users(conn, tenant_id=args.tenant)]
        print_rows(args, rows, ["email", "tenant_id", "role", "disabled", "created_at", "user_id"])
    elif args.users_command == "disable":
        with bootstrap() as ctx, ctx.db.connection() as conn:
            try:
                user = users.disable_user(conn, args.email, tenant_id=args.tenant)
            except LookupError as exc:
                raise ValueError(str(exc)) from exc
        emit(args, [user.as_dict()], lambda r: print(f"disabled {user.email}; its tokens stop working within "
                                                     "5 seconds"))
    return 0


def register(sub) -> None:
    """Add `serve` and `users` to the top-level subparsers."""
    p = sub.add_parser("serve", help="the HTTP API (FastAPI on uvicorn); needs JWT_SECRET")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("users", help="people who may call the HTTP API")
    users_sub = p.add_subparsers(dest="users_command", required=True)
    add = users_sub.add_parser("add", help="add a user (password from a prompt or --password-stdin)")
    add.add_argument("email")
    add.add_argument("--tenant", required=True)
    add.add_argument("--role", choices=["admin", "user"], required=True)
    add.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    add_json_flag(add)
    listing = users_sub.add_parser("list")
    listing.add_argument("--tenant")
    add_json_flag(listing)
    disable = users_sub.add_parser("disable")
    disable.add_argument("email")
    disable.add_argument("--tenant", help="the user's tenant (needed when the address is in several)")
    add_json_flag(disable)
    p.set_defaults(func=cmd_users)
