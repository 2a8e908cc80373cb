"""The models whose vectors serve a tenant's active versions, and the query's vector under each.

A version's chunks are embedded by one model, recorded on the version (``document_versions.embedding_model``).
When the deployment changes its model, a re-index makes each document a new version under the new model, one
promotion at a time; until it reaches a document, that document's active version still holds the old
model's vectors. Search therefore embeds the query once per model in use among the tenant's active versions
and finds each model's nearest chunks with the query embedded by that model; the query's own (current)
model then ranks them all, embedding the other models' few candidates itself (``search._vector_arm``). No
document leaves the vector half of search while the re-index runs. A model's vectors go only with its
versions: once the last version holding them is re-indexed, nothing searches them again.

The old model is loaded from where its files were when it last promoted (``embedding_models``). A search
host without those files ranks that model's versions by text only, says so once in its log, and
``ingestion-pipeline model migration`` shows which models are still in use.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import psycopg

from ingestion_pipeline.core.failures import CodedError
from ingestion_pipeline.documents.chunking import context_line, document_label, embedding_input
from ingestion_pipeline.documents.embedding import Embedder, ModelInfo, model_info

if TYPE_CHECKING:
    import numpy as np

_log = logging.getLogger("ingestion_pipeline.search")


@dataclass(frozen=True)
class ModelInUse:
    """A model whose vectors some of a tenant's active versions hold (``name`` None: versions without a
    recorded model, counted with the query's own)."""

    name: str | None
    versions: int
    chunks: int


@dataclass(frozen=True)
class RegisteredModel:
    name: str
    digest: str
    dimension: int
    model_path: str


class QueryUnderModels(Protocol):
    """One query as every model serving the tenant sees it (what ``search.hybrid_search`` takes)."""

    def vector(self, name: str) -> np.ndarray | None:
        """The query's vector under the model of that name; None when this host cannot embed with it."""

    def embed_passages(self, passages: list[Passage]) -> np.ndarray:
        """Chunks embedded by the query's own model (another model's candidates, to rank with its own)."""


@dataclass(frozen=True)
class Passage:
    """A chunk as the model reads it: its document's label and section path (the context line) and its text."""

    title: str | None
    filename: str | None
    section_path: list[str]
    text: str


# The active versions counted by model, of one tenant (or of all: NULL), kept by a trigger (sql/040).
_MODEL_TOTALS_SQL = """
SELECT name, sum(versions)::bigint AS versions, sum(chunks)::bigint AS chunks
  FROM tenant_serving_totals
 WHERE kind = 'model' AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
 GROUP BY name HAVING sum(versions) > 0
 ORDER BY chunks DESC, name
"""


def in_use(conn: psycopg.Connection, tenant_id: str) -> list[ModelInUse]:
    """The models of the tenant's active versions, most chunks first (from their totals, sql/040: a search reads
    a few rows, not every active version)."""
    rows = conn.execute(_MODEL_TOTALS_SQL, {"tenant": tenant_id}).fetchall()
    return [ModelInUse(r["name"], r["versions"], int(r["chunks"])) for r in rows]


def register(conn: psycopg.Connection, info: ModelInfo, model_path: str) -> None:
    """Record that ``info``'s model promotes versions from the files at ``model_path``."""
    conn.execute(
        """INSERT INTO embedding_models (model_name, model_digest, dimension, model_path)
           VALUES (%s, %s, %s, %s)
           ON CONFLICT (model_name, model_digest) DO UPDATE
              SET model_path = excluded.model_path, last_promoted_at = now()""",
        (info.name, info.digest, info.dimension, model_path))


def registered(conn: psycopg.Connection, name: str) -> RegisteredModel | None:
    """The model of that name that promoted last."""
    row = conn.execute(
        """SELECT model_name, model_digest, dimension, model_path FROM embedding_models WHERE model_name = %s
            ORDER BY last_promoted_at DESC LIMIT 1""", (name,)).fetchone()
    return RegisteredModel(row["model_name"], row["model_digest"], row["dimension"], row["model_path"]) if row \
        else None


@dataclass(frozen=True)
class MigrationProgress:
    """How far the active versions are under the current model: what ``model migration`` prints."""

    current_model: str
    by_model: dict[str | None, ModelInUse]  # every model in use, the current one included

    @property
    def versions(self) -> int:
        return sum(m.versions for m in self.by_model.values())

    @property
    def done(self) -> int:
        current = self.by_model.get(self.current_model)
        return current.versions if current else 0

    @property
    def complete(self) -> bool:
        return self.done == self.versions

    def summary(self) -> str:
        others = [f"{name or 'unrecorded'}: {m.versions} version(s), {m.chunks} chunk(s)"
                  for name, m in self.by_model.items() if name != self.current_model]
        head = f"{self.done}/{self.versions} active version(s) under {self.current_model}"
        return head + ("; still served by " + "; ".join(others) if others else " (complete)")


def migration_progress(conn: psycopg.Connection, current_model: str, tenant_id: str | None = None
                       ) -> MigrationProgress:
    """The active versions (of one tenant, or all) counted by the model whose vectors they hold."""
    rows = conn.execute(_MODEL_TOTALS_SQL, {"tenant": tenant_id}).fetchall()
    return MigrationProgress(current_model, {r["name"]: ModelInUse(r["name"], r["versions"], int(r["chunks"]))
                                             for r in rows})


class QueryEmbedders:
    """The query's vector under each model in use: the current ``embedder`` for its own model, an older model
    loaded (once, on first need) from its registered files, run as the deployment decided for it.

    ``connect`` opens a connection to the application database (to read the registry)."""

    def __init__(self, embedder: Embedder, connect: Callable[[], psycopg.Connection],
                 build: Callable[[str], Embedder]) -> None:
        self.embedder = embedder
        self._connect = connect
        self._build = build
        self._others: dict[str, Embedder | None] = {}
        self._passages: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self.embedder.info.name

    def for_query(self, query: str) -> QueryUnderModels:
        """``query`` under each model (each embeds it once, when a search first needs it)."""
        return _Query(self, query)

    def embed_passages(self, passages: list[Passage]) -> np.ndarray:
        """Chunks embedded by the current model as a re-index under it would (``chunking.embedding_input``: the
        context line, then the text); the same chunks come back search after search while a re-index runs, so
        each is embedded once (up to ``PASSAGE_CACHE`` of them kept)."""
        counter = self.embedder.token_counter
        texts = [embedding_input(context_line(document_label(p.title, p.filename), p.section_path, counter), p.text)
                 for p in passages]
        keys = [hashlib.sha256(t.encode()).digest() for t in texts]
        with self._lock:
            missing = [(key, text) for key, text in zip(keys, texts, strict=True) if key not in self._passages]
        if missing:
            vectors = self.embedder.embed([text for _, text in missing])
            with self._lock:
                for (key, _), vector in zip(missing, vectors, strict=True):
                    self._passages[key] = vector
                while len(self._passages) > PASSAGE_CACHE:
                    self._passages.popitem(last=False)
        with self._lock:
            found = [self._passages.get(key) for key in keys]
        if any(v is None for v in found):  # pushed out by another search in between: embed those again
            found = [v if v is not None else self.embedder.embed([t])[0] for v, t in zip(found, texts, strict=True)]
        import numpy as np

        return np.stack(found) if found else np.zeros((0, self.embedder.info.dimension), dtype=np.float32)

    def other(self, name: str) -> Embedder | None:
        """The older model of that name, loaded on first need (None: this host cannot load it)."""
        with self._load_lock:
            if name not in self._others:
                self._others[name] = self._load(name)
            return self._others[name]

    def give_up(self, name: str, why: Exception) -> None:
        """The older model loaded but cannot embed here (``HostCannotEmbed``: its recorded decision): from now
        on its versions are searched by text only on this host, said once."""
        with self._load_lock:
            self._others[name] = None
        _log.warning("versions embedded by %s are searched by text only on this host: %s", name, why)

    def _load(self, name: str) -> Embedder | None:
        with self._connect() as conn:
            found = registered(conn, name)
        why = None
        if found is None or not found.model_path:
            why = "no host recorded where its files are"
        elif not Path(found.model_path).is_dir():
            why = f"its files are not on this host ({found.model_path})"
        else:
            try:
                if model_info(found.model_path).digest != found.digest:
                    why = f"the files at {found.model_path} are another model now"
            except (OSError, ValueError) as exc:
                why = f"its files at {found.model_path} cannot be read: {exc}"
        if why is None:
            return self._build(found.model_path)
        _log.warning("versions embedded by %s are searched by text only on this host: %s (re-index them under "
                     "the current model: ingestion-pipeline reindex)", name, why)
        return None


PASSAGE_CACHE = 10_000  # chunk vectors of the current model kept for ranking other models' candidates (~15 MB)


class _Query:
    def __init__(self, embedders: QueryEmbedders, query: str) -> None:
        self._embedders = embedders
        self._query = query
        self._made: dict[str, np.ndarray | None] = {}

    def vector(self, name: str) -> np.ndarray | None:
        if name not in self._made:
            model = self._embedders.embedder if name == self._embedders.model else self._embedders.other(name)
            self._made[name] = None if model is None else self._embedded(name, model)
        return self._made[name]

    def _embedded(self, name: str, model: Embedder) -> np.ndarray | None:
        if model is self._embedders.embedder:
            return model.embed([self._query])[0]
        try:
            return model.embed([self._query])[0]
        except CodedError as exc:  # an older model this host cannot run as decided: its versions by text only
            self._embedders.give_up(name, exc)
            return None

    def embed_passages(self, passages: list[Passage]) -> np.ndarray:
        return self._embedders.embed_passages(passages)
