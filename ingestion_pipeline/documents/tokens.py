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


class TokenCounter:
    """Wraps the model's fast tokenizer (a ``tokenizers.Tokenizer``); counts exclude the [CLS]/[SEP] specials."""

    def __init__(self, tokenizer, model_max_tokens: int) -> None:
        self._tokenizer = tokenizer
        # Two special tokens ([CLS], [SEP]) are added around every sequence by the model.
        self.max_content_tokens = model_max_tokens - 2

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def count(self, text: str) -> int:
        return self.count_many([text])[0]

    def split(self, text: str, max_tokens: int) -> list[str]:
        """Split ``text`` into pieces of at most ``max_tokens`` tokens, at sentence ends when possible.

        Cuts fall only where a new word starts, so each piece re-tokenises to the same tokens.
        """
        offsets: list[tuple[int, int]] = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= max_tokens:
            return [text]
        pieces: list[str] = []
        start_tok = 0
        while start_tok < len(offsets):
            end_tok = min(start_tok + max_tokens, len(offsets))
            if end_tok < len(offsets):
                end_tok = self._best_cut(text, offsets, start_tok, end_tok)
            char_start = offsets[start_tok][0]
            char_end = offsets[end_tok][0] if end_tok < len(offsets) else len(text)
            piece = text[char_start:char_end].strip()
            if piece:
                pieces.append(piece)
            start_tok = end_tok
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
        value = json.loads(config.read_text()).get("model_max_length")
        if isinstance(value, int) and 0 < value < 1_000_000:
            tokenizer_max = value
    return _model_max_seq_length(model_dir, tokenizer_max)


def _model_max_seq_length(model_dir: Path, tokenizer_max: int) -> int:
    """sentence-transformers' max_seq_length (sentence_bert_config.json) bounds what is embedded."""
    config = model_dir / "sentence_bert_config.json"
    if config.exists():
        value = json.loads(config.read_text()).get("max_seq_length")
        if value:
            return int(min(value, tokenizer_max))
    return int(min(tokenizer_max, 512))
