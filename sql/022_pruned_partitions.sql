-- Dagster dynamic partitions (document batches, metric uploads) removed once their work was finished and
-- past retention (their runs and materialisations stay in Dagster). A partition whose work is replayed
-- later is added again, and pruned again once it is finished anew (pruned_at earlier than its last finish).
CREATE TABLE pruned_partitions (
    partitions_def  text NOT NULL,
    partition_key   text NOT NULL,
    pruned_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partitions_def, partition_key)
);
