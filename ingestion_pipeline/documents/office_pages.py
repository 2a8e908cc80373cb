"""A DOCX, PPTX or ODT laid out as pages, for people to read: LibreOffice, headless, converts the file to a PDF,
whose pages are then rendered and located like any PDF's (``page_views.py``). The pages are LibreOffice's layout of
the file (close to Word's for most documents, not identical); the text that is chunked and served is still the
extractor's own (``extraction/docx.py``, ``office.py``), so a chunk is found on these pages by its text.

LibreOffice parses untrusted input: it runs in a process group of its own, in a temporary folder that is its home
and profile, with none of this process's environment, links and macros off, without a network where this process
may start it so (root), under the extraction worker's memory cap, and is killed with its group past
``CONVERT_TIMEOUT_SECONDS``. It still reads the host's files as this process's user: deployments that render office
files for untrusted tenants run the workers as a user that can read nothing else (docs/web-app.md).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
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
        profile = Path(folder) / "profile"
        (profile / "user").mkdir(parents=True)
        (profile / "user" / "registrymodifications.xcu").write_text(_LOCKED_DOWN, encoding="utf-8")
        command = [*_confined(memory_mb), binary, f"-env:UserInstallation={profile.as_uri()}", "--headless",
                   "--norestore", "--nolockcheck", "--convert-to", "pdf", "--outdir", folder, str(source)]
        # nothing of this process's environment (database URLs, credentials, secrets) reaches LibreOffice
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": folder, "LANG": "C.UTF-8",
                       "TMPDIR": folder}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=folder,
                                   env=environment, start_new_session=True)
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


# The profile LibreOffice starts with: a text document's links to other files and the web are never updated
# (Writer's link update mode 0, NEVER), so a document cannot pull in a file of this host or an internal URL; macros
# never run.
_SETTINGS = [("/org.openoffice.Office.Writer/Content/Update", "Link", "0"),
             ("/org.openoffice.Office.Common/Security/Scripting", "MacroSecurityLevel", "3"),
             ("/org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
             ("/org.openoffice.Office.Common/Security/Scripting", "BlockUntrustedRefererLinks", "true")]
_LOCKED_DOWN = ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
                'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
                + "".join(f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value>'
                          "</prop></item>\n" for path, name, value in _SETTINGS)
                + "</oor:items>\n")


@functools.cache
def _can_leave_the_network() -> bool:
    """Whether this process may start LibreOffice in a network namespace of its own (root, util-linux's unshare)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        return subprocess.run([unshare, "--net", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _confined(memory_mb: int) -> list[str]:
    """What LibreOffice is started under: its address space capped (util-linux's prlimit, not a ``preexec_fn``, which
    is unsafe in a process with threads), and, where this process may, no network at all."""
    prefix: list[str] = []
    if _can_leave_the_network():
        prefix += ["unshare", "--net", "--"]
    if shutil.which("prlimit"):
        prefix += ["prlimit", f"--as={memory_mb * 1024 * 1024}", "--"]
    return prefix


def _end_group(pid: int) -> None:
    """The process group LibreOffice was started in (its own session: nothing else is in it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
