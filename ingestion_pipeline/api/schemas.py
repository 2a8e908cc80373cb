"""Request and response bodies: the OpenAPI schema the API promises (and schemathesis holds it to)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator, model_validator

from ingestion_pipeline.core.identifiers import IDENTIFIER_PATTERN
from ingestion_pipeline.core.users import EMAIL_PATTERN, ROLES, User
from ingestion_pipeline.metrics.formats import PLATFORMS

T = TypeVar("T")
MAX_ID = 2**63 - 1


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    page: int
    limit: int


# -- auth and users ----------------------------------------------------------------------------------------
class TokenRequest(BaseModel):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)
    tenant_id: str | None = Field(default=None, pattern=IDENTIFIER_PATTERN, description=(
        "needed only when the same address and password sign in to users of several tenants (400 otherwise)"))


class TokenResponse(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"
    expires_in: int


class UserIn(BaseModel):
    email: str = Field(max_length=320, pattern=EMAIL_PATTERN)
    password: str = Field(min_length=8, max_length=72, description=(
        "8 to 72 characters and at most 72 bytes in UTF-8 (bcrypt's limit; a longer one is refused with 400)"))
    role: Literal[ROLES] = "user"

    @field_validator("password")
    @classmethod
    def _at_most_72_bytes(cls, password: str) -> str:
        if len(password.encode()) > 72:
            raise ValueError("a password is at most 72 bytes in UTF-8 (bcrypt reads no more)")
        return password


UserOut = User
"""A user as the API returns it: the stored ``core.users.User`` (FastAPI serialises the dataclass)."""


# -- documents -------------------------------------------------------------------------------------------
class _FileId(BaseModel):
    """``file_id``: the file's row in the ledger; ``run_id`` is its old name, still sent (deprecated)."""

    file_id: int | None = None
    run_id: int | None = Field(default=None, deprecated="the same as file_id; will be removed")

    @model_validator(mode="before")
    @classmethod
    def _both_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("file_id") is None and data.get("run_id") is not None:
            return {**data, "file_id": data["run_id"]}
        if isinstance(data, dict) and data.get("run_id") is None and data.get("file_id") is not None:
            return {**data, "run_id": data["file_id"]}
        return data


class SubmitOut(_FileId):
    """What happened to one uploaded file (queued, duplicate of one in flight, or skipped)."""

    status: Literal["queued", "duplicate", "skipped"]
    filename: str
    doc_id: int | None = None
    reason: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    source_uri: str | None = None


class PresignIn(BaseModel):
    filename: str = Field(min_length=1, max_length=255)
    size_bytes: int = Field(ge=1, le=MAX_ID)
    content_type: str = Field(min_length=1, max_length=255)
    title: str | None = Field(default=None, max_length=500)
    key: str | None = Field(default=None, max_length=200)
    sha256: str | None = Field(default=None, pattern="^[0-9a-f]{64}$",
                               description="the file's SHA-256 (hex): S3 checks the PUT against it, and with an S3 "
                                           "upload store the completion copies the object server-side")


class PresignOut(BaseModel):
    upload_id: str
    url: str
    method: str
    headers: dict[str, str]
    expires_at: datetime


class BatchBacklogOut(BaseModel):
    partition_key: str | None = Field(description="the batch (None: files queued, not in a batch yet)")
    queued: int
    running: int
    eta_seconds: float | None = Field(description="until the batch's last file should be done")


class BacklogOut(BaseModel):
    """What the caller's tenant has waiting in the ledger and when it should be done (documents/backlog.py)."""

    tenant_id: str
    queued: int
    running: int
    files_per_second: float | None = Field(description="the rate the estimate uses")
    rate_from: Literal["tenant", "deployment", "none"] = Field(
        description="the tenant's files finished lately, a share of the deployment's, or none finished lately")
    eta_seconds: float | None = Field(description="until the last file waiting should be done; None: no estimate")
    batches: list[BatchBacklogOut]


class FileOut(_FileId):
    """One file of the ledger."""

    tenant_id: str
    doc_id: int
    run_type: str
    status: str
    source_uri: str
    config: dict[str, Any]
    stats: dict[str, Any]
    error_code: str | None = None
    error: str | None = None
    suggestion: str | None = None
    attempts: int
    partition_key: str | None = None
    dagster_run_id: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime
    next_attempt_at: datetime | None = None


class DocumentOut(BaseModel):
    doc_id: int
    source_uri: str
    title: str | None = None
    filename: str | None = None
    is_active: bool
    version_number: int | None = None
    version_id: int | None = None
    versions: int
    content_hash: str | None = None
    page_count: int | None = None
    chunk_count: int | None = None
    token_count: int | None = None
    size_bytes: int | None = None
    activated_at: datetime | None = None


class VersionOut(BaseModel):
    version_id: int
    version_number: int
    is_active: bool
    content_hash: str
    pipeline_fingerprint: str
    title: str | None = None
    filename: str | None = None
    content_type: str | None = None
    size_bytes: int | None = None
    page_count: int | None = None
    chunk_count: int | None = None
    token_count: int | None = None
    file_id: int | None = None
    ingestion_run_id: int | None = Field(default=None, deprecated="the same as file_id; will be removed")
    activated_at: datetime | None = None
    deactivated_at: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _both_names(cls, data: Any) -> Any:
        """``file_id``: the ledger file the version was made from; ``ingestion_run_id`` is its old name, still sent."""
        if isinstance(data, dict) and data.get("ingestion_run_id") is None and data.get("file_id") is not None:
            return {**data, "ingestion_run_id": data["file_id"]}
        return data


class DocumentDetail(BaseModel):
    doc_id: int
    source_uri: str
    title: str | None = None
    is_active: bool
    created_at: datetime
    updated_at: datetime
    versions: list[VersionOut]


class DeactivatedOut(BaseModel):
    doc_id: int
    deactivated_version_id: int | None = None
    is_active: Literal[False] = False


class Citation(BaseModel):
    doc_id: int
    title: str | None = None
    filename: str | None = None
    source_uri: str
    version_number: int
    page_start: int | None = None
    page_end: int | None = None
    section_path: list[str]
    text: str
    ocr: bool = Field(False, description="read by OCR from a scanned page")


class SearchHitOut(BaseModel):
    chunk_id: int
    score: float
    citation: str
    source: Citation
    vector_rank: int | None = Field(None, description="its rank by vector similarity (none: not among the candidates)")
    text_rank: int | None = Field(None, description="its rank by its words (none: not among the candidates)")
    navigational: bool = Field(False, description="a table of contents or index: ranked after every passage")
    also_in: list[str] = Field(default_factory=list, description="citations of the same passage elsewhere")
    context_before: list[str] = Field(default_factory=list, description="the chunks just before it (context=N)")
    context_after: list[str] = Field(default_factory=list, description="the chunks just after it (context=N)")


class SearchOut(BaseModel):
    query: str
    hits: list[SearchHitOut]


# -- sources ---------------------------------------------------------------------------------------------
class SourceIn(BaseModel):
    uri: str = Field(max_length=1100, pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$",
                     description="s3://bucket/prefix/")
    name: str | None = Field(default=None, pattern=IDENTIFIER_PATTERN)
    endpoint_url: str | None = Field(default=None, max_length=500, description=(
        "an S3-compatible endpoint (MinIO, ...); it must be one of the server's INGESTION_ALLOWED_S3_ENDPOINTS, "
        "else 400; unset: AWS"))
    kind: Literal["documents", "metrics"] = "documents"
    platform: Literal[PLATFORMS] | None = None


class SourceOut(BaseModel):
    source_id: int
    name: str
    kind: str
    uri: str
    endpoint_url: str | None = None
    paused: bool
    platform: str | None = None
    passes_completed: int
    last_pass_completed_at: datetime | None = None
    last_sync_at: datetime | None = None
    last_sync_error: str | None = None
    active_objects: int = 0
    queued_objects: int = 0
    skipped_objects: int = 0
    failed_objects: int = 0
    deleted_objects: int = 0


class SyncStarted(BaseModel):
    source_id: int
    status: Literal["started", "already_running"] = "started"
    detail: str


# -- metrics ---------------------------------------------------------------------------------------------
class MetricSubmitOut(BaseModel):
    status: Literal["pending", "duplicate"]
    upload_id: int | None = None
    duplicate_of: int | None = None
    filename: str
    platform: str
    layout: str | None = None
    reason: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None


class MetricUploadOut(BaseModel):
    upload_id: int
    platform: str
    client_id: str | None = None
    filename: str
    file_format: str
    layout: str | None = None
    status: str
    total_rows: int | None = None
    valid_rows: int | None = None
    invalid_rows: int | None = None
    skipped_rows: int | None = None
    notes: list[str] | None = None
    promoted_rows: int | None = None
    unpromotable_rows: int | None = None
    error: str | None = None
    created_at: datetime
    finished_at: datetime | None = None


class MetricRowErrorOut(BaseModel):
    row_index: int
    line_number: int | None = None
    entity_type: str | None = None
    validation_status: str
    validation_errors: Any = None
    raw_data: Any = None


class EventOut(BaseModel):
    event_id: int
    upload_id: int | None = None
    event_type: str
    payload: dict[str, Any]
    created_at: datetime


class Health(BaseModel):
    status: str
    detail: str | None = None


class ChunkOut(BaseModel):
    chunk_id: int
    ordinal: int
    text: str
    page_start: int | None = None
    page_end: int | None = None
    section_path: list[str]
    token_count: int
    language: str = Field(description="the chunk's text-search configuration (its language)")
    ocr: bool = Field(description="its text was read by OCR")


class VersionChunksOut(BaseModel):
    doc_id: int
    version_id: int
    version_number: int
    is_active: bool
    title: str | None = None
    filename: str | None = None
    content_type: str | None = None
    source_uri: str
    page_count: int | None = None
    chunk_count: int
    token_count: int
    page_images: int = Field(description="how many of its pages have images (GET .../pages/{page}/image)")
    laid_out: bool = Field(description="the pages are LibreOffice's layout of a DOCX, PPTX or ODT: its chunks' "
                                       "page numbers are not these pages' (GET /v1/chunks/{id}/boxes finds them)")
    ocr_pages: list[int] = Field(default_factory=list,
                                 description="the pages read by OCR (scans; GET .../pages/{page}/layout: their words)")
    chunks: list[ChunkOut]


class PageBoxes(BaseModel):
    page: int
    boxes: list[list[float]]


class TextRun(BaseModel):
    text: str
    box: list[float] = Field(description="[x0, y0, x1, y1] in fractions of the page from its top left corner")


class PageLayoutOut(BaseModel):
    doc_id: int
    version_number: int
    page: int
    ocr: bool = Field(description="read by OCR: its runs are Tesseract's words")
    runs: list[TextRun] = Field(description="the page's text as laid out: PDFium's runs of text, or OCR's words")


class ChunkBoxesOut(BaseModel):
    chunk_id: int
    doc_id: int
    version_number: int
    pages: list[PageBoxes]
