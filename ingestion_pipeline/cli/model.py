"""`model prepare|show|export|migration`: the deployment's one decision about how its embedding model runs, and
how far the active versions are under it (``migration``: versions done / total while a re-index runs).

`prepare` is run once per deployment (`make demo`, `make dev`, docker compose's `migrate` job, the Helm chart's
init container); every host then embeds as it says (``documents/model_decision.py``). `export` needs no
database: an image build runs it, so a container starts with the model exported.
"""

from __future__ import annotations

import argparse
import sys

from ingestion_pipeline.cli.bootstrap import bootstrap
from ingestion_pipeline.cli.output import add_json_flag, emit, print_table
from ingestion_pipeline.documents.precision import PRECISIONS


def cmd_model(args: argparse.Namespace) -> int:
    from ingestion_pipeline.documents import model_prepare

    if args.model_command == "export":
        from ingestion_pipeline.core.settings import load_settings

        exported = model_prepare.export(load_settings())
        emit(args, [{"export": str(exported) if exported else None}],
             lambda rows: print(f"exported: {exported}" if exported else "not exported: torch runs the model"))
        return 0
    with bootstrap() as ctx:
        if args.model_command == "prepare":
            print("Preparing the embedding model: the export, then the deployment's precision (judged once, "
                  "recorded in the database)", file=sys.stderr, flush=True)
            prepared = model_prepare.prepare(ctx.db, ctx.settings, precision=args.precision, change=args.change)
            emit(args, [prepared.as_record()], lambda rows: _print_prepared(rows[0]))
            return 0
        if args.model_command == "migration":
            return _migration(args, ctx)
        decisions = model_prepare.history(ctx.db, ctx.settings)
        records = [d.as_record() for d in decisions]
        emit(args, records or [{"decision": None}], lambda rows: _print_history(records))
    return 0


def _migration(args: argparse.Namespace, ctx) -> int:
    from ingestion_pipeline.core.tenants import validate_tenant_id
    from ingestion_pipeline.documents.serving_models import migration_progress

    if args.tenant is not None:
        validate_tenant_id(args.tenant)
    current = ctx.embedder.info.name
    with ctx.db.connection() as conn:
        progress = migration_progress(conn, current, args.tenant)
    rows = [{"model": name, "state": "current" if name == current else "serving until re-indexed",
             "versions": m.versions, "chunks": m.chunks} for name, m in progress.by_model.items()]
    record = {"current_model": current, "tenant": args.tenant, "done": progress.done, "versions": progress.versions,
              "complete": progress.complete, "models": rows}

    def render(_records: list[dict]) -> None:
        print(progress.summary())
        if rows:
            print_table(rows, ["model", "state", "versions", "chunks"])
        if not progress.complete:
            print("search ranks each version by its own model's vectors until the re-index reaches it "
                  "(`ingestion-pipeline reindex` queues what is left)")

    emit(args, [record], render)
    return 0


def _print_prepared(row: dict) -> None:
    verb = {"recorded": "recorded", "kept": "kept (already recorded; checked on this host)",
            "changed": f"changed from {row['previous_precision']}"}[row["outcome"]]
    print(f"Embedding model {row['model']}: {row['precision']} on {row['runtime']} - {verb} ({row['seconds']} s)")
    for e in row["evaluations"]:
        print(f"  {e['candidate']}: " + ("passes" if e["passed"] else e["why_not"] or "fails"))
    if row["warning"]:
        print(f"warning: {row['warning']}")
    if row["outcome"] == "changed":
        print(f"{row['reindex_queued']} active version(s) queued for re-index: `ingestion-pipeline process` (or the "
              "upload sensor under `make dev`) embeds them under the new decision")


def _print_history(records: list[dict]) -> None:
    if not records:
        print("no decision recorded: the first process that embeds records float32; "
              "`ingestion-pipeline model prepare` judges the faster precisions")
        return
    rows = [{**r, "state": "current" if i == 0 else "superseded"} for i, r in enumerate(records)]
    print_table(rows, ["state", "model", "precision", "runtime", "requested", "decided_by", "decided_at",
                       "fingerprint"])


def register(sub) -> None:
    """Add `model` to the top-level subparsers."""
    p = sub.add_parser("model", help="the deployment's embedding model: prepare (export, judge, record once), show "
                                     "(the recorded decisions), export (the ONNX export only, no database), migration "
                                     "(active versions under the current model / total)")
    p.add_argument("model_command", choices=["prepare", "show", "export", "migration"])
    p.add_argument("--tenant", default=None, help="with migration: one tenant's versions (default: all)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="with prepare: the precision to ask for (default INGESTION_EMBEDDING_PRECISION)")
    p.add_argument("--change", action="store_true",
                   help="with prepare: replace the recorded decision (queues a re-index of what it changes)")
    add_json_flag(p)
    p.set_defaults(func=cmd_model)
