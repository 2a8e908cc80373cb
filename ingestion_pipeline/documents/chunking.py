"""Structure-aware chunking under a token budget measured by the embedding model's tokenizer.

Rules, in order:
- a title closes the running chunk and opens a new one (it stays with the text under it);
- elements are packed into a chunk up to ``target`` tokens;
- a table or list item that fits within ``hard_max`` is never split; one that does not is split by
  lines (a table repeats its header row at the top of every part), then by tokens;
- prose longer than ``target`` is split at sentence ends;
- text read by OCR and text from a text layer never share a chunk (an OCR chunk is marked as such);
- every chunk is counted at the end (its pieces' counts summed where the tokenizer's counts add up, see
  ``tokens.TokenCounter``): none exceeds ``hard_max`` (<= the model's max sequence length
  minus its two special tokens), so nothing is silently truncated when embedded;
- a run of more than ``MAX_RUN_CHARS`` characters without a space is broken into pieces of that length first:
  the tokenizer counts such a run as one unknown token, so a 19-million-character "word" would otherwise be
  one chunk of one token; and no chunk holds more than ``MAX_CHUNK_CHARS`` characters whatever its tokens.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from ingestion_pipeline.documents.extraction.elements import LIST_ITEM, OCR_TEXT, TABLE, TITLE, Element
from ingestion_pipeline.documents.tokens import TokenCounter

# 2: a table split by rows repeats its header row; 3: long runs broken; 4: the title and headings embedded with
# the text (CONTEXT_TOKENS kept for them), each chunk indexed in its language
CHUNKER_VERSION = "structure-4"
# Of a chunk's token budget, what its context line (document title > nearest headings) may take in what is
# embedded: MiniLM sees which document and section a passage is from, and the text stays whole under the cap.
CONTEXT_TOKENS = 32
CONTEXT_HEADINGS = 2
_WHOLE_TYPES = (TABLE, LIST_ITEM)
# WordPiece reads a "word" of more than 100 characters as one [UNK] token (max_input_chars_per_word).
MAX_RUN_CHARS = 100
# A 256-token chunk of prose is ~1,000-1,500 characters; this bounds one of unusual text (digits, symbols).
MAX_CHUNK_CHARS = 4000
# An element longer than this is chunked in segments (cut at a space): the tokenizer's encoding of a text is
# large for each token, so a 2M-character element alone took the process to gigabytes (benchmarks/hostile_inputs.py
# measures its peak memory).
MAX_SEGMENT_CHARS = 65_536
COUNT_BATCH_CHARS = 1 << 20  # elements are counted in batches of about this many characters
_LONG_RUN = re.compile(rf"\S{{{MAX_RUN_CHARS + 1},}}")


def break_long_runs(text: str) -> str:
    """``text`` with every run of non-space characters longer than ``MAX_RUN_CHARS`` cut into pieces of at most
    that length, separated by a space (rare: long URLs, base64, a file of one giant word)."""
    if len(text) <= MAX_RUN_CHARS or not _LONG_RUN.search(text):
        return text
    return _LONG_RUN.sub(lambda m: " ".join(m[0][i:i + MAX_RUN_CHARS]
                                            for i in range(0, len(m[0]), MAX_RUN_CHARS)), text)


@dataclass
class Chunk:
    ordinal: int
    text: str
    token_count: int
    page_start: int | None
    page_end: int | None
    section_path: list[str]
    element_types: list[str]
    content_hash: str = field(default="")
    context: str = ""  # embedded before the text (``embedding_input``); not shown
    text_search_config: str = "english"  # the configuration its words are indexed with (documents/languages.py)
    section_key: str | None = None  # its section's, in a document chunked by sections (documents/sections.py)
    # its own language and letters (languages.own_languages), where told before the file's chunks are together
    own_language: tuple[str | None, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.content_hash:
            self.content_hash = text_hash(embedding_input(self.context, self.text))

    def with_context(self, context: str) -> None:
        """Embed ``context`` with the text; the hash (which stored vectors are reused by) follows it."""
        self.context = context
        self.content_hash = text_hash(embedding_input(context, self.text))


def embedding_input(context: str, text: str) -> str:
    """What the model reads for a chunk: its context line, then its text."""
    return f"{context}\n{text}" if context else text


def document_label(title: str | None, filename: str | None) -> str:
    """The document's name as a reader would say it: its title, or its file name without the extension."""
    if title and title != filename:
        return " ".join(title.split())
    stem = (filename or title or "").rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return " ".join(re.sub(r"[-_]+", " ", stem).split())


def context_line(label: str, section_path: list[str], counter: TokenCounter) -> str:
    """``label > heading > heading`` (the nearest ``CONTEXT_HEADINGS``), cut to ``CONTEXT_TOKENS`` tokens."""
    parts = [p for p in [label, *section_path[-CONTEXT_HEADINGS:]] if p and p.strip()]
    line = " > ".join(" ".join(p.split()) for p in parts)
    if not line or counter.count(line) <= CONTEXT_TOKENS:
        return line
    return counter.split(line, CONTEXT_TOKENS)[0]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def effective_budgets(target_tokens: int, max_tokens: int, counter: TokenCounter) -> tuple[int, int]:
    """Clamp configured budgets to what the model can embed: (target, hard_max)."""
    hard_max = min(max_tokens, counter.max_content_tokens)
    if hard_max < 16:
        raise ValueError(f"chunk hard cap of {hard_max} tokens is too small to be useful")
    return min(target_tokens, hard_max), hard_max


@dataclass
class _Piece:
    text: str
    tokens: int
    type: str
    page: int | None
    section_path: list[str]


class _Packer:
    """Packs pieces into chunk groups; titles wait for the text below them."""

    def __init__(self, target: int, hard_max: int) -> None:
        self.target = target
        self.hard_max = hard_max
        self.pieces: list[_Piece] = []
        self.tokens = 0
        self.out: list[list[_Piece]] = []

    def only_titles(self) -> bool:
        return all(p.type == TITLE for p in self.pieces)

    def holds_ocr(self) -> bool:
        return any(p.type == OCR_TEXT for p in self.pieces)

    def _emit(self) -> None:
        if self.pieces:
            self.out.append(self.pieces)
        self.pieces, self.tokens = [], 0

    def flush(self) -> None:
        """Close the running chunk unless it holds only titles (they stay with what follows)."""
        if not self.only_titles():
            self._emit()

    def add(self, piece: _Piece, *, keep_whole: bool = False) -> None:
        if self.pieces:
            over_target = self.tokens + piece.tokens > self.target
            if self.only_titles():
                # Titles join the next piece unless that would break the hard cap (runs of headings).
                if self.tokens + piece.tokens > self.hard_max or (over_target and piece.type == TITLE):
                    self._emit()
            elif over_target or keep_whole and self.tokens + piece.tokens > self.target:
                self._emit()
        self.pieces.append(piece)
        self.tokens += piece.tokens

    def finish(self) -> list[list[_Piece]]:
        self._emit()
        return self.out


def _split_oversized(el: Element, tokens: int, target: int, hard_max: int, counter: TokenCounter) -> list[_Piece]:
    """One element -> pieces within budget (tables/lists by lines first)."""
    if el.type in _WHOLE_TYPES and tokens <= hard_max:
        return [_Piece(el.text, tokens, el.type, el.page_number, el.section_path)]
    if tokens <= target:
        return [_Piece(el.text, tokens, el.type, el.page_number, el.section_path)]
    texts: list[str]
    if el.type in _WHOLE_TYPES and "\n" in el.text:
        texts = []
        lines = el.text.split("\n")
        line_tokens = counter.count_many(lines)
        # a table split by rows repeats its header row in every part (when the header is not itself large)
        header = [lines[0]] if el.type == TABLE and line_tokens[0] <= target // 2 else []
        header_tokens = line_tokens[0] if header else 0
        current: list[str] = []
        current_tokens = 0
        for line, n in zip(lines, line_tokens, strict=True):
            if len(current) > (len(header) if texts else 0) and current_tokens + n > target:
                texts.append("\n".join(current))
                current, current_tokens = list(header), header_tokens
            current.append(line)
            current_tokens += n
        if current:
            texts.append("\n".join(current))
        pieces = [part for t in texts for part in counter.split_counted(t, target)]
    else:
        pieces = counter.split_counted(el.text, target)
    return [_Piece(t, n, el.type, el.page_number, el.section_path) for t, n in pieces]


class TooManyTokens(ValueError):
    """The file's text holds more tokens than ``max_tokens``; counting stopped there, before any chunk was made."""

    def __init__(self, counted: int, limit: int) -> None:
        super().__init__(f"the file holds more than {limit:,} tokens ({counted:,} counted before stopping)")
        self.counted, self.limit = counted, limit


def chunk_elements(
    elements: list[Element], counter: TokenCounter, *, target: int, hard_max: int, max_tokens: int | None = None
) -> list[Chunk]:
    """The file's chunks; with ``max_tokens``, ``TooManyTokens`` as soon as the count passes it (a text bomb is
    refused after counting a batch past the limit, not after chunking all of it)."""
    if target > hard_max:
        raise ValueError("target tokens must not exceed the hard cap")
    elements = [piece for el in elements for piece in _segments(el)]
    element_tokens = _count_in_batches(counter, [el.text for el in elements], max_tokens)
    packer = _Packer(target, hard_max)
    for el, tokens in zip(elements, element_tokens, strict=True):
        if el.type == TITLE:
            packer.flush()
            title_tokens = min(tokens, target // 4)
            text = el.text if tokens <= title_tokens else counter.split(el.text, title_tokens)[0]
            packer.add(_Piece(text, counter.count(text), TITLE, el.page_number, el.section_path + [el.text]))
            continue
        if (el.type == OCR_TEXT) != packer.holds_ocr():
            packer.flush()  # text read by OCR is never mixed with a text layer's: its chunks say "ocr"
        for piece in _split_oversized(el, tokens, target, hard_max, counter):
            packer.add(piece, keep_whole=piece.type in _WHOLE_TYPES)
    groups = packer.finish()

    chunks: list[Chunk] = []
    for group in groups:
        text = "\n".join(p.text for p in group)
        pages = [p.page for p in group if p.page is not None]
        body = [p for p in group if p.type != TITLE] or group
        types = sorted({p.type for p in group})
        chunks.append(
            Chunk(
                ordinal=0,
                text=text,
                token_count=sum(p.tokens for p in group),
                page_start=min(pages) if pages else None,
                page_end=max(pages) if pages else None,
                section_path=body[0].section_path,
                element_types=types,
            )
        )
    return _enforce_hard_max(chunks, counter, hard_max)


def _enforce_hard_max(chunks: list[Chunk], counter: TokenCounter, hard_max: int) -> list[Chunk]:
    """Re-count the final texts with the real tokenizer (its pieces' counts add up for an ``additive`` one: a chunk
    is its pieces joined by newlines); split anything over the caps (tokens, characters); number them."""
    actual = ([c.token_count for c in chunks] if counter.additive
              else counter.count_many([c.text for c in chunks]))
    result: list[Chunk] = []
    for chunk, n in zip(chunks, actual, strict=True):
        if n <= hard_max and len(chunk.text) <= MAX_CHUNK_CHARS:
            chunk.token_count = n
            result.append(chunk)
            continue
        parts = [piece for part in counter.split(chunk.text, hard_max - 8)
                 for piece in _cut_at_spaces(part, MAX_CHUNK_CHARS)]
        for part, part_n in zip(parts, counter.count_many(parts), strict=True):
            result.append(Chunk(0, part, part_n, chunk.page_start, chunk.page_end, chunk.section_path,
                                chunk.element_types))
    for ordinal, chunk in enumerate(result):
        chunk.ordinal = ordinal
        if chunk.token_count > hard_max or len(chunk.text) > MAX_CHUNK_CHARS:
            raise AssertionError(f"chunk {ordinal} has {chunk.token_count} tokens, {len(chunk.text)} characters: "
                                 f"over the caps ({hard_max}, {MAX_CHUNK_CHARS})")
    return result


def _segments(element: Element) -> list[Element]:
    """``element`` with its long runs broken, in pieces of at most ``MAX_SEGMENT_CHARS`` (cut at a space)."""
    text = break_long_runs(element.text)
    if len(text) <= MAX_SEGMENT_CHARS:
        return [element if text is element.text else replace(element, text=text)]
    return [replace(element, text=piece) for piece in _cut_at_spaces(text, MAX_SEGMENT_CHARS)]


def _count_in_batches(counter: TokenCounter, texts: list[str], max_tokens: int | None = None) -> list[int]:
    """Token counts of ``texts``, encoded a batch of about ``COUNT_BATCH_CHARS`` characters at a time."""
    counts: list[int] = []
    start = size = total = 0
    for index, text in enumerate(texts):
        size += len(text)
        if size >= COUNT_BATCH_CHARS or index == len(texts) - 1:
            batch = counter.count_many(texts[start:index + 1])
            counts += batch
            total += sum(batch)
            if max_tokens is not None and total > max_tokens:
                raise TooManyTokens(total, max_tokens)
            start, size = index + 1, 0
    return counts


def _cut_at_spaces(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, each cut at the last space before the limit."""
    pieces = []
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit + 1)
        cut = cut if cut > 0 else limit
        pieces.append(text[:cut])
        text = text[cut:].lstrip(" ")
    return [*pieces, text] if text else pieces
