"""What documents and metrics share, with no Dagster imports: settings, the database, migrations,
tenants, hashing, the upload store and the ledger mechanism."""
