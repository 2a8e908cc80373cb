"""A multipart/form-data body parsed as it arrives (streaming-form-data): the ``file`` part goes
straight into the upload store, hashed in the same pass; small text fields are kept, bounded.

Nothing holds the whole file: each network piece is parsed and written before the next is read. A
size breach stops writing at once, removes the partial file, and drains (bounded) the rest of the body
so the client still receives the 413.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from streaming_form_data import StreamingFormDataParser
from streaming_form_data.parser import ParseFailedException
from streaming_form_data.targets import BaseTarget, ValueTarget
from streaming_form_data.validators import MaxSizeValidator, ValidationError

from ingestion_pipeline.api.errors import ApiError
from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.upload_store import IncomingFile, StoredFile

MAX_FIELD_BYTES = 4096


def openapi_form(extensions: Iterable[str] = (), **fields: dict) -> dict:
    """The OpenAPI request body of a streamed form: a required binary ``file`` (whose file name must end in one of
    ``extensions``) and the given text fields (the body is parsed by ``parse_upload``, not by FastAPI, so the
    schema is stated here)."""
    allowed = ", ".join(sorted(extensions))
    file = {"type": "string", "format": "binary",
            **({"description": f"the file name must end in one of: {allowed} (else 415)"} if allowed else {})}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["file"], "properties": {"file": file, **fields},
    }}}}}
DRAIN_FACTOR = 2  # after a size breach, read at most this many times the limit before hanging up


class _Refused(Exception):
    def __init__(self, error: ApiError) -> None:
        self.error = error


class _StoreTarget(BaseTarget):
    """Writes the file part into the store; checks the file name before the first byte is kept."""

    def __init__(self, open_incoming: Callable[[str], IncomingFile]) -> None:
        super().__init__()
        self._open_incoming = open_incoming
        self.filename: str | None = None
        self.incoming: IncomingFile | None = None
        self.parts = 0
        self.finished = False

    def set_multipart_filename(self, filename: str) -> None:
        self.filename = filename

    def on_start(self) -> None:
        self.parts += 1
        if self.parts > 1:
            raise _Refused(ApiError(400, "invalid_request", "one file per request"))
        self.incoming = self._open_incoming(self.filename or "")

    def on_data_received(self, chunk: bytes) -> None:
        self.incoming.write(chunk)  # raises SizeLimitExceeded past the limit

    def on_finish(self) -> None:
        self.finished = True  # the part's closing delimiter arrived: the file is whole


@dataclass
class ParsedForm:
    filename: str
    stored: StoredFile
    fields: dict[str, str] = field(default_factory=dict)


async def parse_upload(
    headers, body: AsyncIterator[bytes], *, open_incoming: Callable[[str], IncomingFile], max_bytes: int,
    text_fields: tuple[str, ...],
) -> ParsedForm:
    """Parse the body; return the stored file and the text fields, or raise ``ApiError`` with nothing left."""
    content_type = headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(400, "invalid_request", "send the file as multipart/form-data with a 'file' part")
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + 64 * 1024:
        raise ApiError(413, "too_large", f"the body is {int(declared):,} bytes, over the {max_bytes:,} byte limit")
    try:
        parser = StreamingFormDataParser(headers=headers)
    except (ParseFailedException, ValueError) as exc:
        raise ApiError(400, "invalid_request", f"not a multipart body: {exc}") from exc
    target = _StoreTarget(open_incoming)
    parser.register("file", target)
    values = {name: ValueTarget(validator=MaxSizeValidator(MAX_FIELD_BYTES)) for name in text_fields}
    for name, value in values.items():
        parser.register(name, value)
    received = 0
    try:
        async for piece in body:
            received += len(piece)
            parser.data_received(piece)
    except SizeLimitExceeded as exc:
        _abort(target)
        async for piece in body:  # let the client finish sending, so it reads the 413
            received += len(piece)
            if received > DRAIN_FACTOR * max_bytes:
                break
        raise ApiError(413, "too_large", str(exc)) from exc
    except _Refused as refused:
        _abort(target)
        raise refused.error from None
    except ApiError:
        _abort(target)
        raise
    except (ParseFailedException, ValidationError, ValueError) as exc:
        _abort(target)
        raise ApiError(400, "invalid_request", f"malformed multipart body: {exc}") from exc
    except BaseException:  # the client went away, or the server is stopping
        _abort(target)
        raise
    if target.incoming is None:
        raise ApiError(400, "invalid_request", "the form has no 'file' part")
    if not target.finished:
        _abort(target)
        raise ApiError(400, "invalid_request", "the body ended before the file part did")
    if target.incoming.size == 0:
        _abort(target)
        raise ApiError(400, "invalid_request", "the file is empty")
    fields = {}
    for name, value in values.items():
        try:
            fields[name] = value.value.decode()
        except UnicodeDecodeError as exc:
            _abort(target)
            raise ApiError(400, "invalid_request", f"field {name!r} is not UTF-8") from exc
    stored = target.incoming.commit()
    return ParsedForm(target.filename or "", stored, {k: v for k, v in fields.items() if v})


def _abort(target: _StoreTarget) -> None:
    if target.incoming is not None:
        target.incoming.abort()
