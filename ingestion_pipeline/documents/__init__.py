"""Documents: intake of uploads, batching, extraction, chunking, embedding, staging, promotion and
search. Plain Python (no Dagster imports); the assets in ``defs/documents`` call into it."""
