"""Ad platforms and export formats. The SQL CHECK constraints and the CLI choices follow these."""

from __future__ import annotations

PLATFORMS = ("meta", "google", "tiktok")

# extension -> data_uploads.file_format
METRIC_FORMATS: dict[str, str] = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
