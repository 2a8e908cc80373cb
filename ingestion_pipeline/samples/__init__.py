"""Generated sample data for the demo, the tests and the benchmarks. The pipeline never imports it."""
