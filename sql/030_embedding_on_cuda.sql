-- The embedding device is part of the deployment's model decision (documents/devices.py): a decision judged on
-- an NVIDIA GPU runs sentence-transformers there (runtime 'cuda'), in float32 or float16 ('f16', judged by the
-- same quality gate as the CPU precisions).
ALTER TABLE model_decisions DROP CONSTRAINT model_decisions_precision_check,
    ADD CONSTRAINT model_decisions_precision_check CHECK (precision IN ('f32', 'bf16', 'int8', 'f16'));
ALTER TABLE model_decisions DROP CONSTRAINT model_decisions_runtime_check,
    ADD CONSTRAINT model_decisions_runtime_check CHECK (runtime IN ('openvino', 'onnx', 'torch', 'cuda'));
ALTER TABLE model_decisions DROP CONSTRAINT model_decisions_requested_check,
    ADD CONSTRAINT model_decisions_requested_check CHECK (requested IN ('auto', 'int8', 'bf16', 'f16', 'f32'));
