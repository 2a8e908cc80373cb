"""`make demo`: ingest the sample corpus into the embedded Postgres and show what happened.

Runs the same path a user does: submit (upload store + ledger) -> process (document_batch_job through
the project's Dagster instance) -> ledger, documents, search with citations.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import time
from pathlib import Path

from ingestion_pipeline import cli


def _quiet(argv: list[str]) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli.main(argv)
    return buffer.getvalue()


DEMO_S3_PORT = 9555


def s3_demo(corpus: Path, tenant: str) -> None:
    """Sync a bucket on a local S3 server (moto, 127.0.0.1): add, modify, delete."""
    import os

    import boto3
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = f"http://127.0.0.1:{DEMO_S3_PORT}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=DEMO_S3_PORT, verbose=False)
    server.start()
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="demo-handbook")
        for name in ("fake-memo.pdf", "simple.docx", "ideas-page.html", "codeblock.md"):
            client.upload_file(str(corpus / "documents" / name), "demo-handbook", f"kb/{name}")
        client.put_object(Bucket="demo-handbook", Key="kb/logo.png", Body=b"\x89PNG")
        print(f"\n== S3: local S3 server at {endpoint}, bucket demo-handbook/kb/ with 5 objects ==")
        if "demo-s3" not in _quiet(["source", "list"]):
            print(_quiet(["source", "add", "s3://demo-handbook/kb/", "--tenant", tenant, "--name", "demo-s3",
                          "--endpoint-url", endpoint]).strip())
        for step, action in (
            ("initial sync", None),
            ("after modifying kb/codeblock.md", lambda: client.put_object(
                Bucket="demo-handbook", Key="kb/codeblock.md",
                Body=(corpus / "documents" / "codeblock.md").read_bytes() + b"\n\n## Changelog\n\nRevised.\n")),
            ("after deleting kb/simple.docx", lambda: client.delete_object(Bucket="demo-handbook",
                                                                          Key="kb/simple.docx")),
        ):
            if action:
                action()
            output = _quiet(["sync", "demo-s3", "--wait", "--json"])
            report = json.loads(output.splitlines()[0])["sync"]
            print(f"   {step}: {report['new']} new, {report['changed']} changed, {report['unchanged']} unchanged, "
                  f"{report['skipped']} skipped, {report['deleted']} deleted")
        print("== S3 source status ==")
        cli.main(["source", "list"])
    finally:
        server.stop()


def metrics_demo(workspace: str) -> None:
    """A generated meta export with 5 % invalid rows: staged, validated, promoted, one event."""
    import tempfile

    from ingestion_pipeline.samples.metric_exports import daily_rows, with_invalid_share, write_export

    folder = Path(tempfile.mkdtemp(prefix="demo-metrics-"))
    export = write_export(folder / "meta-export.csv", "meta", with_invalid_share(daily_rows(3, 4, 5, 7), 0.05))
    print(f"\n== Metrics: {export.name}, 420 daily rows (5 % invalid) for workspace '{workspace}' ==")
    submitted = json.loads(_quiet(["metrics", "submit", str(export), "--workspace", workspace, "--platform", "meta",
                                   "--json"]))
    print(f"   submit: {submitted['status']}" + (f" ({submitted['reason']})" if submitted.get("reason") else ""))
    for line in _quiet(["process", "--json"]).splitlines():
        if '"metric_upload"' in line:
            upload = json.loads(line)["metric_upload"]
            print(f"   upload {upload['upload_id']}: {upload['status']}, {upload['promoted_rows']} rows promoted, "
                  f"{upload['invalid_rows']} invalid")
    if submitted.get("upload_id"):
        print("== Invalid rows (first 5) ==")
        for line in _quiet(["metrics", "errors", str(submitted["upload_id"])]).splitlines()[:5]:
            print("   " + line)
    print("== Completion events ==")
    cli.main(["events", "--workspace", workspace])


def generated_samples() -> list[Path]:
    """One file of each format read through unstructured, and a scanned PDF (OCR), written once: a second
    `make demo` submits the same bytes, so they are skipped like the corpus."""
    from ingestion_pipeline.core.settings import data_dir
    from ingestion_pipeline.samples.office_documents import write_office_samples
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pdf

    folder = data_dir() / "demo-samples"
    if not (folder / "done").exists():
        write_office_samples(folder)
        write_scanned_pdf(folder / "harbour-minutes-scan.pdf", [
            "Harbour Board minutes, winter session",
            "The harbour master approved the winter ferry schedule.",
            "Ferries sail twice daily until the ice melts in April."])
        (folder / "done").touch()
    return sorted(p for p in folder.iterdir() if p.name != "done")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True, help="folder holding documents/ and broken/")
    parser.add_argument("--tenant", default="demo")
    args = parser.parse_args()
    # The demo prints its own summary; the per-file JSON log lines and the S3 server's access log stay quiet.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("ingestion_pipeline.ledger").disabled = True
    corpus = Path(args.corpus)
    if not (corpus / "documents").is_dir():
        print(f"corpus not found at {corpus!r}; pass CORPUS=/path/to/corpus", file=sys.stderr)
        return 2
    files = sorted((corpus / "documents").iterdir()) + sorted((corpus / "broken").iterdir()) + generated_samples()
    print(f"== Submitting {len(files)} files for tenant '{args.tenant}' (good and broken; slides, a sheet, mail, "
          "e-books and a scan generated beside them) ==")
    counts: dict[str, int] = {}
    for line in _quiet(["submit", *map(str, files), "--tenant", args.tenant, "--json"]).splitlines():
        result = json.loads(line)
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    print("   " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))

    print("== Processing the queue (document_batch_job, one run per batch; the first file loads the model) ==")
    start = time.perf_counter()
    output = _quiet(["process", "--json"])
    elapsed = time.perf_counter() - start
    for line in output.splitlines():
        if not line.startswith("{"):
            print("   " + line)
            continue
        report = json.loads(line)
        batch = report["batch"]
        print(f"   batch {batch['partition_key']} (Dagster run {batch['dagster_run_id'][:8]}): "
              f"{batch['files']} files, {batch.get('succeeded', 0)} succeeded, {batch.get('failed', 0)} failed")
        for f in report["files"]:
            print(f"     {f['status']:<9} {f['file']:<45} {f['detail']}")
    print(f"   processed in {elapsed:.0f} s")

    print("== Documents now served ==")
    cli.main(["documents", "--tenant", args.tenant])
    print("\n== Failed files (the ledger) ==")
    cli.main(["runs", "--tenant", args.tenant, "--status", "failed"])
    for query in ("What does the Universal Declaration of Human Rights say about dignity?",
                  "risk factors in the annual report", "When will the lantern be serviced?",
                  "winter ferry schedule"):
        print(f"\n== search: {query!r} ==")
        cli.main(["search", query, "--tenant", args.tenant, "-k", "3"])
    print("\n== reindex --dry-run: is any active version from another pipeline (chunker, model)? ==")
    cli.main(["reindex", "--dry-run", "--tenant", args.tenant])
    s3_demo(corpus, args.tenant)
    metrics_demo(args.tenant)
    print("\nRun `make demo` again: unchanged files are skipped (no extraction, no embedding).")
    print("Dagster UI with sensors: `make dev` (http://127.0.0.1:3000). Stop the embedded Postgres: `make stop`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
