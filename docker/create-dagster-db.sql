-- Dagster's own storage lives beside the application database, in its own database.
CREATE DATABASE dagster OWNER ingestion;
