"""What the catalog says about each asset: the Postgres table it lands in, that table's main columns, owners.

Dagster shows ``dagster/table_name`` and ``dagster/column_schema`` on the asset page; the columns listed are
the ones a reader of the table needs (``test_catalog.py`` checks each exists in the migrated schema).
"""

import dagster as dg

OWNERS = ["team:data-platform"]


def _table(name: str, *columns: tuple[str, str, str]) -> dict:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t, description=d) for c, t, d in columns])
    return {"dagster/table_name": name, "dagster/column_schema": dg.MetadataValue.table_schema(schema)}


TABLES: dict[str, dict] = {
    "raw_documents": _table(
        "ingestion_runs",
        ("file_id", "bigint", "the file's ledger id"),
        ("tenant_id", "text", "whose file"), ("doc_id", "bigint", "the document it is a version of"),
        ("status", "text", "queued, running, succeeded, failed, dead_letter or canceled"),
        ("attempts", "integer", "claims so far"), ("error_code", "text", "why it failed, for machines"),
        ("content_hash", "text", "SHA-256 of the bytes"), ("partition_key", "text", "its batch")),
    "document_elements": _table(
        "staging_elements",
        ("file_id", "bigint", "the file (ingestion_runs.file_id)"), ("ordinal", "integer", "order in the file"),
        ("element_type", "text", "title, narrative_text, list_item, table …"), ("text", "text", "the text"),
        ("page_number", "integer", "page, when the format has pages"),
        ("section_path", "text[]", "the titles above it")),
    "document_chunks": _table(
        "staging_chunks",
        ("file_id", "bigint", "the file (ingestion_runs.file_id)"), ("ordinal", "integer", "order in the file"),
        ("text", "text", "the chunk"), ("token_count", "integer", "tokens under the embedding model"),
        ("section_path", "text[]", "the titles above it")),
    "document_embeddings": _table(
        "staging_chunks",
        ("file_id", "bigint", "the file (ingestion_runs.file_id)"), ("ordinal", "integer", "order in the file"),
        ("embedding", "vector(384)", "the chunk's vector; NULL until embedded"),
        ("embedding_reused", "boolean", "taken from an identical chunk already embedded")),
    "promoted_documents": _table(
        "document_versions",
        ("version_id", "bigint", "the version"), ("tenant_id", "text", "whose document"),
        ("doc_id", "bigint", "the document"), ("version_number", "integer", "1, 2, … per document"),
        ("is_active", "boolean", "the one version search serves"),
        ("pipeline_fingerprint", "text", "extractor, chunker and model that made it"),
        ("chunk_count", "integer", "its chunks (table chunks; vectors in chunk_embeddings)")),
    "raw_metric_files": _table(
        "data_uploads",
        ("upload_id", "bigint", "the upload"), ("workspace_id", "text", "whose export"),
        ("platform", "text", "meta, google or tiktok"),
        ("status", "text", "pending, processing, staging_complete, promoting, completed, failed …"),
        ("total_rows", "integer", "rows staged"), ("valid_rows", "integer", "rows that validated")),
    "staged_metric_rows": _table(
        "staging_rows",
        ("upload_id", "bigint", "the upload"), ("row_index", "integer", "1-based data row"),
        ("entity_type", "text", "campaign, ad_set, ad or daily_metric"),
        ("validation_status", "text", "valid, invalid or unpromotable"),
        ("validation_errors", "jsonb", "each invalid field and why")),
    "promoted_metrics": _table(
        "daily_metrics",
        ("workspace_id", "text", "whose metrics"), ("platform", "text", "meta, google or tiktok"),
        ("ad_id", "text", "the ad"), ("date", "date", "the day"), ("impressions", "bigint", ""),
        ("clicks", "bigint", ""), ("spend", "numeric(20,6)", "in currency"), ("currency", "text", "ISO 4217")),
}


def table_metadata(asset_name: str) -> dict:
    """The asset's ``dagster/table_name`` and ``dagster/column_schema``."""
    return TABLES[asset_name]
