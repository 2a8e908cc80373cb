"""Ad-platform metric exports: intake, streaming readers, normalisation and validation, staging, promotion."""
