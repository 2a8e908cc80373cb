"""How runs are launched and executed: one planner and launcher for every caller (the sensors, `process`, an
upload's fast path), the instance's extension points named in ``dagster_home/dagster.yaml`` (the run launcher and
its warm workers, the compute log manager, the pooled instance), the executor (in process or Celery), and what a
failed or dead run leaves behind (finalisation, the janitor). ``defs/`` holds the definitions only and calls in here.
"""
