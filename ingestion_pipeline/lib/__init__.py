"""Plain Python for the pipeline: no Dagster imports here, everything unit-tested on its own."""
