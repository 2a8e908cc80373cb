"""The contract's error codes (``ERR_*``), mapped from the pipeline's own failure codes, with suggestions.

A job's status hash carries ``error_code`` (``ERR_PDF_INVALID`` …), ``error_type`` (``recoverable`` or
``non_recoverable``) and ``suggestions`` (a JSON list). The pipeline's code stays in ``error`` so nothing
is lost in the mapping.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from ingestion_pipeline.core.failures import classify

RECOVERABLE, NON_RECOVERABLE = "recoverable", "non_recoverable"


@dataclass(frozen=True)
class JobError:
    code: str  # ERR_*
    message: str
    recoverable: bool
    suggestions: tuple[str, ...] = ()

    @property
    def error_type(self) -> str:
        return RECOVERABLE if self.recoverable else NON_RECOVERABLE


# ERR code -> suggestions a person can act on
SUGGESTIONS: dict[str, tuple[str, ...]] = {
    "ERR_FILE_NOT_FOUND": ("check that source_path exists on the consumer's host and is readable",
                           "push the job again once the file is in place"),
    "ERR_UNSUPPORTED_TYPE": ("convert the file to a supported format (pdf, docx, html, md, txt, pptx, xlsx, eml, "
                             "msg, epub, odt, rtf)",),
    "ERR_FILE_TOO_LARGE": ("split the file, or raise INGESTION_MAX_UPLOAD_BYTES / the text limits "
                           "(docs/configuration.md)",),
    "ERR_PATH_REFUSED": ("put the file under the rag's root (`ingestion-pipeline queue rag list`)",
                         "symlinks are resolved: a link out of the root is refused"),
    "ERR_UNKNOWN_RAG": ("register it: `ingestion-pipeline queue rag add RAG_ID --tenant TENANT --root DIR`",
                        "then `ingestion-pipeline queue dead-letter replay`"),
    "ERR_PDF_INVALID": ("open the PDF in a viewer; re-export or repair it",),
    "ERR_PDF_ENCRYPTED": ("remove the password and push the file again",),
    "ERR_NO_TEXT": ("the file holds no text to index; scanned pages need Tesseract (make system-deps)",),
    "ERR_DOCUMENT_INVALID": ("the file is corrupt or not what its extension says; re-export it",),
    "ERR_ENCODING": ("save the text as UTF-8",),
    "ERR_EXTRACTION_TIMEOUT": ("split the file, or raise INGESTION_EXTRACTION_TIMEOUT_SECONDS",),
    "ERR_CHECKSUM": ("the stored bytes changed after intake; push the job again",),
    "ERR_DATABASE": ("retried with backoff; check that Postgres is reachable",),
    "ERR_NETWORK": ("retried with backoff; check S3 / the network",),
    "ERR_MEMORY": ("retried with backoff; a worker with more memory, or a smaller file",),
    "ERR_DISK": ("free space on the upload store's disk",),
    "ERR_CANCELED": ("the file was canceled; `ingestion-pipeline retry FILE_ID` replays it",),
    "ERR_INTERNAL": ("a bug or an unexpected input: see `ingestion-pipeline files show FILE_ID`",),
}

_BY_PIPELINE_CODE: dict[str, str] = {
    "pdf_corrupt": "ERR_PDF_INVALID", "pdf_no_pages": "ERR_PDF_INVALID", "pdf_page_unreadable": "ERR_PDF_INVALID",
    "pdf_password_protected": "ERR_PDF_ENCRYPTED",
    "pdf_no_text_layer": "ERR_NO_TEXT", "ocr_failed": "ERR_NO_TEXT", "ocr_timeout": "ERR_EXTRACTION_TIMEOUT",
    "file_empty": "ERR_NO_TEXT", "file_whitespace_only": "ERR_NO_TEXT", "no_text": "ERR_NO_TEXT",
    "no_chunks": "ERR_NO_TEXT", "docx_no_text": "ERR_NO_TEXT", "html_no_text": "ERR_NO_TEXT",
    "markdown_no_text": "ERR_NO_TEXT",
    "docx_corrupt": "ERR_DOCUMENT_INVALID", "docx_unreadable": "ERR_DOCUMENT_INVALID",
    "eml_unreadable": "ERR_DOCUMENT_INVALID", "rtf_unreadable": "ERR_DOCUMENT_INVALID",
    "html_unparseable": "ERR_DOCUMENT_INVALID", "html_too_deep": "ERR_DOCUMENT_INVALID",
    "extraction_failed": "ERR_DOCUMENT_INVALID", "text_truncated_json": "ERR_DOCUMENT_INVALID",
    "text_encoding_unknown": "ERR_ENCODING",
    "text_too_large": "ERR_FILE_TOO_LARGE", "file_too_much_text": "ERR_FILE_TOO_LARGE",
    "extraction_memory_exceeded": "ERR_FILE_TOO_LARGE",
    "extraction_timeout": "ERR_EXTRACTION_TIMEOUT",
    "unsupported_format": "ERR_UNSUPPORTED_TYPE", "format_support_missing": "ERR_UNSUPPORTED_TYPE",
    "raw_checksum_mismatch": "ERR_CHECKSUM", "raw_missing": "ERR_FILE_NOT_FOUND",
    "db_unavailable": "ERR_DATABASE", "db_conflict": "ERR_DATABASE", "lease_expired": "ERR_INTERNAL",
    "s3_unavailable": "ERR_NETWORK", "s3_error": "ERR_NETWORK",
    "worker_out_of_memory": "ERR_MEMORY", "canceled": "ERR_CANCELED",
}


def err_code(pipeline_code: str | None) -> str:
    """The contract's code for a pipeline failure code (``ERR_INTERNAL`` for one it does not name)."""
    return _BY_PIPELINE_CODE.get(pipeline_code or "", "ERR_INTERNAL")


def job_error(code: str, message: str, *, recoverable: bool = False) -> JobError:
    return JobError(code, message, recoverable, SUGGESTIONS.get(code, ()))


def from_pipeline(pipeline_code: str | None, message: str, *, transient: bool = False) -> JobError:
    return job_error(err_code(pipeline_code), message, recoverable=transient)


def from_exception(exc: BaseException) -> JobError:
    """An error met while accepting a job: recoverable when trying again can help (the database, the
    network, memory, a full or failing disk), else not."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
        return job_error("ERR_DISK", f"the upload store could not be written: {exc}", recoverable=True)
    info = classify(exc)
    return from_pipeline(info.code, info.message, transient=info.transient)
