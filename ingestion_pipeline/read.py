"""Read the promoted data as pandas DataFrames: what an analyst reaches for in a notebook.

    from ingestion_pipeline import read
    read.daily_metrics("acme", start="2026-11-01", end="2026-11-30", campaign="c-1")
    read.documents("acme")                      # one row per version, the active one marked
    read.search("acme", "parental leave", k=5)  # hybrid search, each hit with its citation

Every function takes the tenant (a metrics workspace is a tenant) and every query filters by it in SQL,
exactly as the HTTP API does: another tenant's rows cannot be returned. The engine is SQLAlchemy's, on the
same database as the pipeline (``DATABASE_URL``, else the embedded server), one per URL and process.
"""

from __future__ import annotations

import datetime as dt
import threading

import pandas as pd
import sqlalchemy as sa
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from ingestion_pipeline.core.db import resolve_database_url
from ingestion_pipeline.core.tenants import validate_tenant_id

_ENGINES: dict[str, sa.Engine] = {}
_ENGINES_LOCK = threading.Lock()


def engine(database_url: str | None = None) -> sa.Engine:
    """A SQLAlchemy engine (psycopg 3 driver, connections checked before use) on the pipeline's database."""
    url = database_url or resolve_database_url(allow_embedded=True)  # a person's notebook on a dev machine
    with _ENGINES_LOCK:
        if url not in _ENGINES:
            driver_url = url.replace("postgres://", "postgresql://", 1)
            driver_url = driver_url.replace("postgresql://", "postgresql+psycopg://", 1)
            created = sa.create_engine(driver_url, pool_pre_ping=True, pool_size=2, max_overflow=2)
            # pgvector's type, looked up once per new connection (search passes the query's vector)
            sa.event.listen(created, "connect", lambda dbapi_connection, _record: register_vector(dbapi_connection))
            _ENGINES[url] = created
        return _ENGINES[url]


_DAILY_METRICS = sa.text("""
SELECT m.date, m.platform, c.campaign_id, c.name AS campaign_name, s.ad_set_id, s.name AS ad_set_name,
       a.ad_id, a.name AS ad_name, m.impressions, m.clicks, m.spend, m.currency, m.conversions,
       m.last_upload_id
  FROM daily_metrics m
  JOIN ads a ON a.workspace_id = m.workspace_id AND a.platform = m.platform AND a.ad_id = m.ad_id
  JOIN ad_sets s ON s.workspace_id = a.workspace_id AND s.platform = a.platform AND s.ad_set_id = a.ad_set_id
  JOIN campaigns c ON c.workspace_id = s.workspace_id AND c.platform = s.platform AND c.campaign_id = s.campaign_id
 WHERE m.workspace_id = :workspace
   AND (CAST(:start AS date) IS NULL OR m.date >= :start)
   AND (CAST(:end AS date) IS NULL OR m.date <= :end)
   AND (CAST(:campaign AS text) IS NULL OR c.campaign_id = :campaign)
   AND (CAST(:platform AS text) IS NULL OR m.platform = :platform)
 ORDER BY m.date, m.platform, c.campaign_id, s.ad_set_id, a.ad_id
""")


def daily_metrics(
    workspace: str, *, start: str | dt.date | None = None, end: str | dt.date | None = None,
    campaign: str | None = None, platform: str | None = None, database_url: str | None = None,
) -> pd.DataFrame:
    """Promoted daily metrics of a workspace (dates inclusive), with the campaign, ad set and ad names."""
    validate_tenant_id(workspace)
    params = {"workspace": workspace, "start": _date(start), "end": _date(end), "campaign": campaign,
              "platform": platform}
    with engine(database_url).connect() as conn:
        frame = pd.read_sql_query(_DAILY_METRICS, conn, params=params, parse_dates=["date"])
    frame["spend"] = frame["spend"].astype(float)
    frame["conversions"] = frame["conversions"].astype(float)
    return frame


_TOP_CAMPAIGNS = sa.text("""
SELECT c.platform, c.campaign_id, c.name AS campaign_name, sum(m.spend) AS spend,
       sum(m.impressions) AS impressions, sum(m.clicks) AS clicks, count(*) AS daily_rows
  FROM daily_metrics m
  JOIN ads a ON a.workspace_id = m.workspace_id AND a.platform = m.platform AND a.ad_id = m.ad_id
  JOIN ad_sets s ON s.workspace_id = a.workspace_id AND s.platform = a.platform AND s.ad_set_id = a.ad_set_id
  JOIN campaigns c ON c.workspace_id = s.workspace_id AND c.platform = s.platform AND c.campaign_id = s.campaign_id
 WHERE m.workspace_id = :workspace AND m.last_upload_id = :upload_id
 GROUP BY c.platform, c.campaign_id, c.name
 ORDER BY spend DESC, c.campaign_id
 LIMIT :limit
""")


def top_campaigns(workspace: str, upload_id: int, *, limit: int = 5, database_url: str | None = None) -> pd.DataFrame:
    """The campaigns with the most spend among the daily rows an upload last wrote (its promotion's preview)."""
    validate_tenant_id(workspace)
    with engine(database_url).connect() as conn:
        frame = pd.read_sql_query(_TOP_CAMPAIGNS, conn,
                                  params={"workspace": workspace, "upload_id": upload_id, "limit": limit})
    frame["spend"] = frame["spend"].astype(float)
    return frame


_DOCUMENT_VERSIONS = sa.text("""
SELECT d.doc_id, d.source_uri, coalesce(v.title, d.title) AS title, v.filename, v.version_number,
       v.is_active, v.content_hash, v.pipeline_fingerprint, v.page_count, v.chunk_count, v.token_count,
       v.size_bytes, v.activated_at, v.deactivated_at
  FROM documents d
  JOIN document_versions v ON v.doc_id = d.doc_id AND v.tenant_id = :tenant
 WHERE d.tenant_id = :tenant AND (NOT :active_only OR v.is_active)
 ORDER BY d.doc_id, v.version_number DESC
""")


def documents(tenant: str, *, active_only: bool = False, database_url: str | None = None) -> pd.DataFrame:
    """A tenant's documents, one row per version (newest first within a document); ``is_active`` marks the
    version being served. ``active_only``: only what search reads."""
    validate_tenant_id(tenant)
    with engine(database_url).connect() as conn:
        return pd.read_sql_query(_DOCUMENT_VERSIONS, conn, params={"tenant": tenant, "active_only": active_only})


def search(tenant: str, query: str, *, k: int = 5, embedder=None, database_url: str | None = None) -> pd.DataFrame:
    """Hybrid search (``documents/search.py``) over the tenant's active versions, a hit a row with its citation.

    ``embedder`` (a ``documents.embedding.Embedder``) defaults to the pipeline's configured model, loaded once.
    """
    from ingestion_pipeline.documents.search import hybrid_search

    url = database_url or resolve_database_url(allow_embedded=True)
    embedders = _query_embedders(embedder or _default_embedder(url), url)
    vector, tokens = embedders.embedder.embed_query(query)
    with engine(database_url).connect() as conn:
        driver = conn.connection.driver_connection  # the psycopg connection the domain query runs on
        rows_as = driver.row_factory
        driver.row_factory = dict_row  # as the domain query expects; SQLAlchemy's own rows are tuples again after
        try:
            hits = hybrid_search(driver, tenant_id=tenant, query=query, query_vector=vector, k=k,
                                 model=embedders.model, other_models=embedders.for_query(query), query_tokens=tokens)
        finally:
            driver.row_factory = rows_as
            conn.rollback()
    rows = [hit.as_dict() for hit in hits]
    return pd.DataFrame(rows, columns=["score", "citation", "doc_id", "title", "version_number", "page_start",
                                       "page_end", "section_path", "text", "chunk_id", "source_uri"])


_EMBEDDER = None
_QUERY_EMBEDDERS: dict[tuple[int, str], object] = {}  # (id of the current embedder, database) -> QueryEmbedders


def _query_embedders(current, database_url: str):
    """The query's vector under each model serving (older ones loaded once per process and kept)."""
    with _ENGINES_LOCK:
        key = (id(current), database_url)
        if key not in _QUERY_EMBEDDERS or _QUERY_EMBEDDERS[key].embedder is not current:
            from ingestion_pipeline import services
            from ingestion_pipeline.core.settings import load_settings

            _QUERY_EMBEDDERS[key] = services.query_embedders(load_settings(), current, database_url)
        return _QUERY_EMBEDDERS[key]


def _default_embedder(database_url: str):
    """The configured model, run as the deployment's recorded decision says (the query's vector must be made
    as the chunks' were)."""
    global _EMBEDDER
    with _ENGINES_LOCK:  # the model loads once, however many threads search at first
        if _EMBEDDER is None:
            from ingestion_pipeline import services
            from ingestion_pipeline.core.settings import load_settings

            _EMBEDDER = services.embedder(load_settings(), database_url=database_url)
    return _EMBEDDER


def _date(value: str | dt.date | None) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"a date must be YYYY-MM-DD, got {value!r}") from exc
