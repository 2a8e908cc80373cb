-- A queue job's id is its tenant's: SQS producers choose job ids freely, so two tenants may send the same
-- one, and neither may refuse the other's job. A Redis job id names its rag, which names one tenant.
ALTER TABLE queue_jobs DROP CONSTRAINT queue_jobs_pkey;
ALTER TABLE queue_jobs ADD PRIMARY KEY (tenant_id, job_id);
CREATE INDEX queue_jobs_job_id_idx ON queue_jobs (job_id);
