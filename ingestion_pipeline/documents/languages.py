"""Each chunk's language, as the Postgres text-search configuration its words are indexed with.

py3langid (an offline model of 97 languages shipped in the package) reads each chunk of at least
``MIN_DETECT_CHARS`` letters; a shorter one (a heading, a table cell), or one it is not sure of
(``MIN_CHUNK_CONFIDENCE``: a table of figures, a list of names), takes the language of most of its file's text.
A language Postgres has no stemmer for is indexed with ``simple`` (words as they are, lower-cased).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

MIN_DETECT_CHARS = 60
# The identifier's automaton reads a text byte by byte: its cost grows with the sample. On the corpus's 8,856
# chunks, the first 600 characters decided as the first 2,000 did for every chunk (400: 3 differed, all in the
# 100-language declaration), in less time (benchmarks/pipeline_ceiling.py measures chunking's share of the pipeline
# when the model costs nothing).
DETECT_SAMPLE_CHARS = 600
MIN_QUERY_WEIGHT = 0.2
MIN_CHUNK_CONFIDENCE = 0.9
DEFAULT_CONFIG = "english"
FALLBACK_CONFIG = "simple"
# ISO 639-1 -> the configuration Postgres ships for it (every one of these exists since PostgreSQL 12)
CONFIGS = {
    "ar": "arabic", "da": "danish", "de": "german", "el": "greek", "en": "english", "es": "spanish",
    "fi": "finnish", "fr": "french", "ga": "irish", "hu": "hungarian", "id": "indonesian", "it": "italian",
    "lt": "lithuanian", "nb": "norwegian", "ne": "nepali", "nl": "dutch", "nn": "norwegian", "no": "norwegian",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sv": "swedish", "ta": "tamil", "tr": "turkish",
}
TEXT_SEARCH_CONFIGS = frozenset(CONFIGS.values()) | {FALLBACK_CONFIG}


_identifier_lock = threading.Lock()
_loaded: list = []  # the process's one identifier, once loaded
_batched: list = []  # ``BatchIdentifier`` over it


def _identifier():
    """py3langid's identifier, loaded once per process: its model is an xz-compressed file, slow to read."""
    if _loaded:  # every chunk asks: no lock once loaded
        return _loaded[0]
    with _identifier_lock:
        if not _loaded:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _loaded.append(LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True))
        return _loaded[0]


def warm_up() -> None:
    """Start loading the identifier on a background thread (xz decompression releases the GIL), so that a run's
    chunk step does not wait for it after the extract step: called where a run's work starts, as the embedding
    model's warm-up is."""
    if not _loaded:
        threading.Thread(target=_identifier, name="language-identifier-warm-up", daemon=True).start()


def detect_languages(texts: Sequence[str]) -> list[tuple[str, float]]:
    """ISO 639-1 code and probability of each text's language: py3langid's, walked for all texts at once
    (``batch_language_id``)."""
    if not _batched:
        from ingestion_pipeline.documents.batch_language_id import BatchIdentifier  # numpy: not on submit's path

        identifier = _identifier()
        with _identifier_lock:
            if not _batched:
                _batched.append(BatchIdentifier(identifier))
    return _batched[0].classify_many(texts)


def config_for(code: str) -> str:
    return CONFIGS.get(code, FALLBACK_CONFIG)


def text_search_configs(texts: Sequence[str]) -> list[str]:
    """The configuration of each text: its own language when it is long enough to tell, else the file's."""
    return with_main_language(own_languages(texts))


def own_languages(texts: Sequence[str]) -> list[tuple[str | None, int]]:
    """Each text's own configuration (None: too short or too unsure to tell) and its letters, its weight in its
    file's language. Texts of one file may be told apart (parts of a big document, on other workers)."""
    letters = [sum(map(str.isalpha, text[:2000])) for text in texts]
    long_enough = [i for i, n in enumerate(letters) if n >= MIN_DETECT_CHARS]
    found = dict(zip(long_enough, detect_languages([texts[i][:DETECT_SAMPLE_CHARS] for i in long_enough]),
                     strict=True))
    own: list[tuple[str | None, int]] = []
    for i in range(len(texts)):
        code, probability = found.get(i, (None, 0.0))
        own.append((None, letters[i]) if code is None or probability < MIN_CHUNK_CONFIDENCE
                   else (config_for(code), letters[i]))
    return own


def with_main_language(own: Sequence[tuple[str | None, int]]) -> list[str]:
    """The file's texts' configurations: each its own, or the file's main language (weighed by letters over the
    texts whose own is known) where it has none."""
    weight: Counter[str] = Counter()
    for config, letters in own:
        if config is not None:
            weight[config] += letters
    main = weight.most_common(1)[0][0] if weight else DEFAULT_CONFIG
    return [config or main for config, _ in own]


def query_language_weights(query: str, configs: Sequence[str]) -> dict[str, float]:
    """How much each of ``configs`` (the tenant's) should count in parsing ``query``: the query's probability
    of being in its language, relative to the likeliest (1.0), those under ``MIN_QUERY_WEIGHT`` left out.
    ``simple`` counts only when the query is most likely in a language without a stemmer: parsed that way,
    an English question's "how" and "of" (stop words English drops) would look like rare words."""
    ranked = _identifier().rank(query)
    weights: dict[str, float] = {}
    for code, probability in ranked:
        config = CONFIGS.get(code)
        if config in configs:
            weights[config] = weights.get(config, 0.0) + float(probability)
    top_code, top_probability = ranked[0]
    if FALLBACK_CONFIG in configs and top_code not in CONFIGS and top_probability >= 0.5:
        weights[FALLBACK_CONFIG] = float(top_probability)
    best = max(weights.values(), default=0.0)
    if best <= 0:
        fallback = [DEFAULT_CONFIG] if DEFAULT_CONFIG in configs else list(configs)
        return dict.fromkeys(fallback, 1.0)
    return {config: w / best for config, w in sorted(weights.items()) if w / best >= MIN_QUERY_WEIGHT}
