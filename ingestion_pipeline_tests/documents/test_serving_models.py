"""The query under every model serving a tenant: each model embeds a query once, candidates' texts are embedded
once per process (bounded), and a model a host cannot load is refused with why, not guessed."""

import logging
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import psycopg
from psycopg.rows import dict_row

from ingestion_pipeline.documents import serving_models
from ingestion_pipeline.documents.serving_models import Passage, QueryEmbedders


@dataclass(frozen=True)
class _Info:
    name: str
    dimension: int = 4


class _Words:
    def count(self, text: str) -> int:
        return len(text.split())

    def split(self, text: str, n: int) -> list[str]:
        words = text.split()
        return [" ".join(words[i:i + n]) for i in range(0, len(words), n)]


class _CountingEmbedder:
    def __init__(self, name: str) -> None:
        self.info = _Info(name)
        self.embedded: list[str] = []
        self.token_counter = _Words()

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])


def _embedders(current, database_url: str, build=None) -> QueryEmbedders:
    return QueryEmbedders(current, lambda: psycopg.connect(database_url, autocommit=True, row_factory=dict_row),
                          build or (lambda path: _CountingEmbedder("old")))


def test_each_model_embeds_a_query_once(database_url, db, tmp_path, monkeypatch):
    folder = tmp_path / "old-model"
    folder.mkdir()
    current, old = _CountingEmbedder("new"), _CountingEmbedder("old")
    embedders = _embedders(current, database_url, build=lambda path: old)
    db.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) VALUES (%s, %s, 4, %s)",
               ("old", "a" * 64, str(folder)))
    monkeypatch.setattr(serving_models, "model_info", lambda path: SimpleNamespace(digest="a" * 64))
    query = embedders.for_query("what is the leave policy")
    assert query.vector("old") is not None and query.vector("old") is not None
    assert query.vector("new") is not None and query.vector("new") is not None
    assert old.embedded == ["what is the leave policy"] and current.embedded == ["what is the leave policy"]
    embedders.for_query("another question").vector("old")  # the old model is loaded once per process
    assert old.embedded == ["what is the leave policy", "another question"]


def test_candidate_texts_are_embedded_once_and_the_cache_is_bounded(database_url, monkeypatch):
    current = _CountingEmbedder("new")
    embedders = _embedders(current, database_url)
    def chunk(text: str) -> Passage:
        return Passage("Leave policy", "leave.md", ["Parental leave"], text)

    first = embedders.embed_passages([chunk("alpha"), chunk("beta")])
    again = embedders.embed_passages([chunk("beta"), chunk("alpha"), chunk("gamma")])
    # each read as the model reads a chunk (its context line first), each once
    assert current.embedded == [f"Leave policy > Parental leave\n{t}" for t in ("alpha", "beta", "gamma")]
    assert np.array_equal(first[0], again[1]) and again.shape == (3, 4)
    monkeypatch.setattr(serving_models, "PASSAGE_CACHE", 2)
    embedders.embed_passages([chunk("delta")])
    assert len(embedders._passages) == 2
    assert embedders.embed_passages([]).shape == (0, 4)


def test_a_model_this_host_cannot_load_is_text_only_and_says_why(database_url, db, tmp_path, caplog):
    embedders = _embedders(_CountingEmbedder("new"), database_url)
    db.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) VALUES "
               "('moved', %s, 4, %s), ('unrecorded', %s, 4, '')", ("b" * 64, str(tmp_path / "nowhere"), "c" * 64))
    (tmp_path / "retrained").mkdir()
    (tmp_path / "retrained" / "config.json").write_text('{"hidden_size": 4}')
    (tmp_path / "retrained" / "model.safetensors").write_bytes(b"other weights")
    db.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) VALUES "
               "('retrained', %s, 4, %s)", ("d" * 64, str(tmp_path / "retrained")))
    query = embedders.for_query("q")
    with caplog.at_level(logging.WARNING, logger="ingestion_pipeline.search"):
        assert [query.vector(n) for n in ("moved", "unrecorded", "retrained", "never-seen", "moved")] == [None] * 5
    why = [r.getMessage() for r in caplog.records]
    assert len(why) == 4  # once per model
    assert "its files are not on this host" in why[0] and "no host recorded where its files are" in why[1]
    assert "are another model now" in why[2] and "no host recorded" in why[3]


def test_an_old_model_that_cannot_embed_here_leaves_its_versions_to_text(database_url, db, tmp_path, monkeypatch,
                                                                          caplog):
    from ingestion_pipeline.documents.model_decision import HostCannotEmbed

    class _Refusing(_CountingEmbedder):
        def embed(self, texts):
            raise HostCannotEmbed(SimpleNamespace(model_name="old", candidate=SimpleNamespace(
                precision="int8", runtime="openvino"), decided_when="by prepare"), "its vectors differ here")

    (tmp_path / "old").mkdir()
    db.execute("INSERT INTO embedding_models (model_name, model_digest, dimension, model_path) VALUES (%s, %s, 4, %s)",
               ("old", "e" * 64, str(tmp_path / "old")))
    monkeypatch.setattr(serving_models, "model_info", lambda path: SimpleNamespace(digest="e" * 64))
    embedders = _embedders(_CountingEmbedder("new"), database_url, build=lambda path: _Refusing("old"))
    with caplog.at_level(logging.WARNING, logger="ingestion_pipeline.search"):
        assert embedders.for_query("q").vector("old") is None
        assert embedders.for_query("q2").vector("old") is None  # not loaded again
    [warning] = [r.getMessage() for r in caplog.records]
    assert "searched by text only" in warning and "its vectors differ here" in warning
