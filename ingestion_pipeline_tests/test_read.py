"""``ingestion_pipeline.read``: DataFrames of promoted data, tenant-scoped as the HTTP API is, on the real
embedded Postgres after real promotions."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest

from ingestion_pipeline import read
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.metrics.assets import promoted_metrics, raw_metric_files, staged_metric_rows
from ingestion_pipeline.defs.partitions import metric_uploads
from ingestion_pipeline.defs.resources import HeartbeatResource, PostgresResource, SettingsResource
from ingestion_pipeline.metrics.uploads import submit_metric_file
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline_tests.helpers import ingest, shared_embedder


def _promote_export(instance, database, tmp_path, workspace: str, seed: int):
    path = write_export(tmp_path / f"{workspace}.csv", "meta", daily_rows(2, 2, 2, 3, seed=seed))
    with path.open("rb") as stream:
        submitted = submit_metric_file(database, LocalUploadStore(tmp_path / "store"), workspace_id=workspace,
                                       platform="meta", filename=path.name, stream=stream, max_bytes=2**24)
    instance.add_dynamic_partitions(metric_uploads.name, [submitted.partition_key])
    result = dg.materialize([raw_metric_files, staged_metric_rows, promoted_metrics],
                            partition_key=submitted.partition_key, instance=instance,
                            resources={"postgres": PostgresResource(), "heartbeat": HeartbeatResource(),
                                       "settings": SettingsResource()})
    assert result.success
    return submitted, result


def test_daily_metrics_by_workspace_date_range_and_campaign_with_names(database, database_url, tmp_path):
    with dg.instance_for_test() as instance:
        submitted, result = _promote_export(instance, database, tmp_path, "acme", seed=1)
        _promote_export(instance, database, tmp_path, "globex", seed=2)

        frame = read.daily_metrics("acme")
        assert len(frame) == 2 * 2 * 2 * 3  # every promoted row of acme, none of globex's
        assert {"campaign_name", "ad_set_name", "ad_name", "spend", "impressions"} <= set(frame.columns)
        assert frame.loc[frame.ad_id == "c1s0a1", "ad_name"].unique().tolist() == ["Ad 1.0.1"]
        assert frame.loc[frame.ad_id == "c1s0a1", "campaign_name"].unique().tolist() == ["Campaign 1"]
        assert pd.api.types.is_datetime64_any_dtype(frame["date"]) and frame["spend"].dtype == float

        one_day = read.daily_metrics("acme", start="2024-03-02", end="2024-03-02", campaign="c0")
        assert len(one_day) == 2 * 2 and set(one_day.campaign_id) == {"c0"}
        assert set(one_day.date.dt.strftime("%Y-%m-%d")) == {"2024-03-02"}
        assert read.daily_metrics("initech").empty  # a workspace with nothing is an empty frame, not an error

        top = read.top_campaigns("acme", submitted.upload_id, limit=1)
        assert len(top) == 1
        assert top.spend[0] == pytest.approx(frame.groupby("campaign_id").spend.sum().max())
        assert read.top_campaigns("globex", submitted.upload_id).empty  # acme's upload, seen from globex

        # the promotion's Dagster metadata previews the same table
        [materialization] = [e.materialization for e in result.get_asset_materialization_events()
                             if e.materialization.asset_key == promoted_metrics.key]
        preview = materialization.metadata["top_campaigns"].value
        assert [r.data["campaign_id"] for r in preview.records][:1] == top.campaign_id.tolist()

    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        read.daily_metrics("acme", start="March")
    with pytest.raises(ValueError):
        read.daily_metrics("acme'; DROP TABLE daily_metrics; --")


def test_documents_and_search_are_the_tenants_own(database, database_url, tmp_path):
    (tmp_path / "leave.md").write_text("# Leave\n\nParental leave is sixteen weeks at full pay.")
    (tmp_path / "other.md").write_text("# Leave\n\nGlobex offers no parental leave at all.")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", tmp_path / "leave.md")
        ingest(instance, database, "globex", tmp_path / "other.md")

    docs = read.documents("acme")
    assert len(docs) == 1 and docs.is_active.tolist() == [True] and docs.chunk_count[0] >= 1
    assert read.documents("initech").empty

    hits = read.search("acme", "parental leave", k=5, embedder=shared_embedder())
    assert len(hits) >= 1
    assert all("sixteen weeks" in text for text in hits.text)  # globex's chunk is never among acme's hits
    assert hits.citation[0] == "leave (v1, Leave)"  # the document's title, its version and section
