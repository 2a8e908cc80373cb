"""Token counting and splitting with the embedding model's own tokenizer.

Chunk budgets must be measured in the tokens the model will see, or text beyond its max sequence
length is silently truncated at embedding time.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

_SENTENCE_END = re.compile(r"[.!?;:](?=\s)|\n")
# A tokenizer made of these splits every text at whitespace before it looks up words, and its normalizer works
# character by character: no token spans a space or a newline, so "a\nb" is a's tokens then b's, and a text
# joined at whitespace counts the sum of its parts (BERT's WordPiece models: MiniLM, mpnet, bge, e5).
_WHITESPACE_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})
_PER_CHARACTER_NORMALIZERS = frozenset({"NoneType", "BertNormalizer", "Lowercase", "StripAccents"})
_WORD_MODELS = frozenset({"WordPiece", "WordLevel"})


def counts_add_up(tokenizer) -> bool:
    """Whether ``tokenizer``'s count of texts joined at whitespace is the sum of their counts (see above)."""
    return (type(tokenizer.pre_tokenizer).__name__ in _WHITESPACE_PRE_TOKENIZERS
            and type(tokenizer.normalizer).__name__ in _PER_CHARACTER_NORMALIZERS
            and type(tokenizer.model).__name__ in _WORD_MODELS)


class TokenCounter:
    """Wraps the model's fast tokenizer (a ``tokenizers.Tokenizer``); counts exclude the [CLS]/[SEP] specials.

    ``additive``: texts joined at whitespace count the sum of their parts (``counts_add_up``), so chunking
    adds its pieces' counts instead of encoding every chunk again (the text is tokenized once, not 2.5 times);
    any other tokenizer's chunks are counted again whole."""

    def __init__(self, tokenizer, model_max_tokens: int) -> None:
        self._tokenizer = tokenizer
        # Two special tokens ([CLS], [SEP]) are added around every sequence by the model.
        self.max_content_tokens = model_max_tokens - 2
        self.additive = counts_add_up(tokenizer)

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        # the same ids without each token's character offsets, which a count does not read: a quarter less of
        # chunking's time (tokenizers 0.21+; an older one encodes in full)
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        return [len(e.ids) for e in encode(texts, add_special_tokens=False)]

    def count(self, text: str) -> int:
        return self.count_many([text])[0]

    def split(self, text: str, max_tokens: int) -> list[str]:
        """Split ``text`` into pieces of at most ``max_tokens`` tokens, at sentence ends when possible.

        Cuts fall only where a new word starts, so each piece re-tokenises to the same tokens.
        """
        return [piece for piece, _ in self.split_counted(text, max_tokens)]

    def split_counted(self, text: str, max_tokens: int) -> list[tuple[str, int]]:
        """``split``'s pieces with their token counts: for an ``additive`` tokenizer the tokens between two cuts
        at whitespace (the encoding already made), otherwise (or at a cut inside a word) each piece encoded
        again."""
        offsets: list[tuple[int, int]] = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= max_tokens:
            return [(text, len(offsets))]
        pieces: list[tuple[str, int]] = []
        recount: list[int] = []  # pieces whose count the tokens between their cuts do not give
        start_tok = 0
        while start_tok < len(offsets):
            end_tok = min(start_tok + max_tokens, len(offsets))
            if end_tok < len(offsets):
                end_tok = self._best_cut(text, offsets, start_tok, end_tok)
            char_start = offsets[start_tok][0]
            char_end = offsets[end_tok][0] if end_tok < len(offsets) else len(text)
            piece = text[char_start:char_end].strip()
            if piece:
                if not (self.additive and _cut_at_space(text, offsets, start_tok)
                        and _cut_at_space(text, offsets, end_tok)):
                    recount.append(len(pieces))
                pieces.append((piece, end_tok - start_tok))
            start_tok = end_tok
        for index, n in zip(recount, self.count_many([pieces[i][0] for i in recount]), strict=True):
            pieces[index] = (pieces[index][0], n)
        return pieces

    @staticmethod
    def _best_cut(text: str, offsets: list[tuple[int, int]], start: int, end: int) -> int:
        """Latest token index in (start, end] that begins a word, preferring one after a sentence end."""
        floor = start + max(1, (end - start) * 6 // 10)
        word_starts = [i for i in range(end, start, -1) if offsets[i][0] > offsets[i - 1][1]]
        for i in word_starts:
            if i < floor:
                break
            gap = text[offsets[i - 1][0]:offsets[i][0]]
            if _SENTENCE_END.search(gap):
                return i
        if word_starts:
            return word_starts[0]
        return end  # one enormous "word" (e.g. a URL run): cut between tokens


def _cut_at_space(text: str, offsets: list[tuple[int, int]], index: int) -> bool:
    """Whether a cut before token ``index`` falls at whitespace (or at either end of the text): the tokens on each
    side are then those of the text on each side."""
    if index <= 0 or index >= len(offsets):
        return True
    gap = text[offsets[index - 1][1]:offsets[index][0]]
    return bool(gap) and gap.isspace()


def load_token_counter(model_path: str) -> TokenCounter:
    """Only the tokenizer (no weights, no torch): chunking does not need the model itself."""
    return TokenCounter(load_tokenizer(model_path), model_max_seq_length(Path(model_path)))


def load_tokenizer(model_path: str):
    """The model's ``tokenizers.Tokenizer`` with truncation and padding off (tokenizer.json may set both).

    Read from ``tokenizer.json`` directly (a fraction of a second; importing transformers takes seconds);
    a model folder without one gets it converted by transformers.
    """
    from tokenizers import Tokenizer

    path = Path(model_path) / "tokenizer.json"
    if path.is_file():
        tokenizer = Tokenizer.from_file(str(path))
    else:
        from transformers import AutoTokenizer

        logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
        tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True).backend_tokenizer
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def model_max_seq_length(model_dir: Path) -> int:
    """sentence-transformers' max_seq_length (sentence_bert_config.json), within the tokenizer's own limit."""
    tokenizer_max = 512
    config = model_dir / "tokenizer_config.json"
    if config.exists():
        value = json.loads(config.read_text(encoding="utf-8")).get("model_max_length")
        if isinstance(value, int) and 0 < value < 1_000_000:
            tokenizer_max = value
    return _model_max_seq_length(model_dir, tokenizer_max)


def _model_max_seq_length(model_dir: Path, tokenizer_max: int) -> int:
    """sentence-transformers' max_seq_length (sentence_bert_config.json) bounds what is embedded."""
    config = model_dir / "sentence_bert_config.json"
    if config.exists():
        value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        if value:
            return int(min(value, tokenizer_max))
    return int(min(tokenizer_max, 512))
