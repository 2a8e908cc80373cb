"""S3 sources: the registry of a tenant's bucket prefixes and the listing sync that turns new,
changed and deleted objects into queued work (plain Python, no Dagster imports)."""
