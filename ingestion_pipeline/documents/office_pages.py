"""A DOCX, PPTX or ODT laid out as pages, for people to read: LibreOffice, headless, converts the file to a PDF,
whose pages are then rendered and located like any PDF's (``page_views.py``). The pages are LibreOffice's layout of
the file (close to Word's for most documents, not identical); the text that is chunked and served is still the
extractor's own (``extraction/docx.py``, ``office.py``), so a chunk is found on these pages by its text.

LibreOffice parses untrusted input: it runs in a process group of its own, in a temporary folder that is its home
and profile, under the extraction worker's memory cap, and is killed with its group past ``CONVERT_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("ingestion_pipeline.documents")

CONVERTIBLE = (".docx", ".pptx", ".odt")
CONVERT_TIMEOUT_SECONDS = 120.0
MANIFEST = "pages.json"  # the view that says a version's pages were laid out from another format, and how many


def soffice_binary() -> str | None:
    """LibreOffice's command, or None when it is not installed (``make`` installs Debian's)."""
    return shutil.which("soffice") or shutil.which("libreoffice")


@contextmanager
def converted_to_pdf(path: Path, extension: str, *, memory_mb: int = 3072,
                     timeout_seconds: float = CONVERT_TIMEOUT_SECONDS) -> Iterator[Path | None]:
    """The file at ``path`` as a PDF in a temporary folder (removed when the block ends); None when LibreOffice is
    not installed, fails, or runs out of time (logged: the file's text is served all the same)."""
    binary = soffice_binary()
    if binary is None or extension.lower() not in CONVERTIBLE:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="office-pages-") as folder:
        # a plain name: the uploaded file's own name never reaches a command line
        source = Path(folder) / f"document{extension.lower()}"
        shutil.copyfile(path, source)
        command = [binary, f"-env:UserInstallation={(Path(folder) / 'profile').as_uri()}", "--headless",
                   "--norestore", "--nolockcheck", "--convert-to", "pdf", "--outdir", folder, str(source)]
        limit = memory_mb * 1024 * 1024

        def bounded() -> None:  # in the child, before LibreOffice starts
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=folder,
                                   env={**os.environ, "HOME": folder}, start_new_session=True, preexec_fn=bounded)
        try:
            output, _ = process.communicate(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            _end_group(process.pid)
            output, _ = process.communicate()
            log.warning("%s: LibreOffice did not lay it out within %.0f s; its pages are not shown", path.name,
                        timeout_seconds)
            yield None
            return
        _end_group(process.pid)  # LibreOffice's own helpers, if any outlived it
        pdf = Path(folder) / "document.pdf"
        if process.returncode != 0 or not pdf.is_file():
            log.warning("%s: LibreOffice could not lay it out (exit %s: %s); its pages are not shown", path.name,
                        process.returncode, output.decode(errors="replace").strip()[-300:])
            yield None
            return
        yield pdf


def _end_group(pid: int) -> None:
    """The process group LibreOffice was started in (its own session: nothing else is in it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
