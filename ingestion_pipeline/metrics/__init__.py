"""Ad-platform metric exports: intake, streaming readers, normalisation and validation, staging,
promotion and cleanup. Plain Python (no Dagster imports)."""
