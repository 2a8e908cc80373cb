"""Queue intakes: document jobs that arrive on the Redis job queue (the ``rag:ingest:*`` contract) or on SQS
(S3 event notifications and job messages). Both end in the ledger that uploads and S3 listings feed; a
message is acknowledged only after its ledger row is committed."""
