-- The deployment's one decision about how its embedding model runs (documents/model_decision.py): recorded by
-- `ingestion-pipeline model prepare` (or, where none was made, float32 by the first process that embeds), and
-- read by every process, so every host embeds as the others do and the pipeline fingerprint never depends on
-- the host that computed it. One current decision per model digest; a change supersedes it and re-indexes.
CREATE TABLE model_decisions (
    decision_id bigserial PRIMARY KEY,
    model_digest text NOT NULL CHECK (model_digest ~ '^[0-9a-f]{64}$'),
    model_name text NOT NULL,
    precision text NOT NULL CHECK (precision IN ('f32', 'bf16', 'int8')),
    runtime text NOT NULL CHECK (runtime IN ('openvino', 'onnx', 'torch')),
    model_file text NOT NULL,
    requested text NOT NULL CHECK (requested IN ('auto', 'int8', 'bf16', 'f32')),
    decided_by text NOT NULL CHECK (decided_by IN ('prepare', 'default')),
    judged_on_cpu text,          -- the CPU identity of the host that judged the candidates (precision.cpu_identity)
    fingerprint text,            -- the pipeline fingerprint `prepare` decided it with (chunk settings may change it)
    evaluations jsonb NOT NULL DEFAULT '[]',
    probe_vectors bytea,         -- float32 vectors of onnx_encoder.PROBE_TEXTS as the deciding host computed them
    decided_at timestamptz NOT NULL DEFAULT now(),
    superseded_at timestamptz
);
CREATE UNIQUE INDEX model_decisions_current ON model_decisions (model_digest) WHERE superseded_at IS NULL;
