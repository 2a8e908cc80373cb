"""How a settings field is declared (``env``), how an area reads the environment (``_Area``), and the parsers
that turn a variable's text into its value: a ``ValueError`` from a parser becomes "NAME must be EXPECTED, got
'raw'". The areas themselves are in ``settings.py``.
"""

from __future__ import annotations

import contextvars
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, SettingsConfigDict


def _at_least_one(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


def _nice(raw: str) -> int:
    if not 0 <= (value := int(raw)) <= 19:
        raise ValueError(raw)
    return value


def _s3_store_uri(raw: str) -> str | None:
    value = raw.strip()
    if value in ("", "local"):
        return None
    bucket = value[5:].split("/", 1)[0] if value.startswith("s3://") else ""
    if not bucket:
        raise ValueError(raw)
    return value.rstrip("/")


def _finite(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):  # float() takes "nan" and "inf": no setting means either
        raise ValueError(raw)
    return value


def _positive(raw: str) -> float:
    value = _finite(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


def _at_least(low: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = _finite(raw)
        if value < low:
            raise ValueError(raw)
        return value

    return parse


MAX_TOKEN_HOURS = 24 * 365


def _token_hours(raw: str) -> float:
    value = _finite(raw)
    if not 0 < value <= MAX_TOKEN_HOURS or value * 3600 < 1:
        raise ValueError(raw)
    return value


QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _queue_name(raw: str) -> str:
    if not QUEUE_NAME.fullmatch(raw.strip()):
        raise ValueError(raw)
    return raw.strip()


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(raw)
        return value

    return parse


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


_READING_ENVIRONMENT = contextvars.ContextVar("reading_environment", default=False)


class _Parse:
    """How one environment variable's text becomes its field's value."""

    def __init__(self, parse: Callable[[str], Any] | None, expected: str, empty_is_default: bool) -> None:
        self.parse, self.expected, self.empty_is_default = parse, expected, empty_is_default


def env(name: str, *more: str, default: Any = None, description: str = "", shown: str | None = None,
        parse: Callable[[str], Any] | None = None, expected: str = "", empty_is_default: bool = True,
        default_factory: Callable[[], Any] | None = None) -> Any:
    """A field read from the environment variable ``name`` (else from the first of ``more`` that is set).

    ``parse`` turns the variable's text into the value, and a ``ValueError`` from it becomes "NAME must be
    EXPECTED, got 'raw'"; ``shown``: the default as docs/configuration.md shows it; ``empty_is_default``: an
    empty variable is the default (else it is parsed: an empty INGESTION_RETRY_BACKOFF means no retries)."""
    extra = {"env": name, "shown": shown, "parse": _Parse(parse, expected, empty_is_default)}
    kwargs: dict[str, Any] = {"validation_alias": AliasChoices(name, *more), "description": description,
                              "json_schema_extra": extra}
    if default_factory is not None:
        return Field(default_factory=default_factory, **kwargs)
    return Field(default, **kwargs)


class _Area(BaseSettings):
    """One area's settings. Built directly: defaults and arguments; ``from_environment()``: the environment too."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True, env_ignore_empty=False,
                                      case_sensitive=True)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        if _READING_ENVIRONMENT.get():
            return init_settings, env_settings
        return (init_settings,)

    @classmethod
    def from_environment(cls, **overrides: Any):
        token = _READING_ENVIRONMENT.set(True)
        try:
            return cls(**overrides)
        except ValidationError as exc:  # the first problem, as the variable's own message
            error = exc.errors()[0]
            cause = error.get("ctx", {}).get("error")
            raise ValueError(str(cause) if cause else f"{error['loc']}: {error['msg']}") from None
        finally:
            _READING_ENVIRONMENT.reset(token)

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, value: Any, info) -> Any:
        """A variable's text through its field's parser (values given as arguments are taken as they are)."""
        field = cls.model_fields[info.field_name]
        extra = field.json_schema_extra or {}
        rule: _Parse | None = extra.get("parse") if isinstance(extra, dict) else None
        if not isinstance(value, str) or rule is None or not _READING_ENVIRONMENT.get():
            return value
        if value == "" and rule.empty_is_default:
            raise PydanticUseDefault()
        if rule.parse is None:
            return value
        try:
            return rule.parse(value)
        except ValueError as exc:
            raise ValueError(f"{extra['env']} must be {rule.expected}, got {value!r}") from exc


def _http_url(raw: str) -> str:
    if raw.strip().lower() == "off":
        return "off"
    url = raw.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) < 10:
        raise ValueError(raw)
    return url


def _int(raw: str) -> int:
    return int(raw)


def _float(raw: str) -> float:
    return float(raw)


def _path(raw: str) -> Path:
    return Path(raw).resolve()


def _comma_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _seconds_list(raw: str) -> tuple[float, ...]:
    return tuple(float(part) for part in raw.split(",") if part.strip())


def _redis_url(raw: str) -> str | None:
    return None if raw.strip().lower() == "none" else raw


WHOLE_AT_LEAST_ONE = "a whole number of at least 1"
