"""The Celery step task's plan (``runtime/celery_steps.py``): a run's job loaded once per worker process, not twice a
step.

A run that a code server launches (the daemon, `make dev`) carries repository load data in its job; the task hands
Dagster a plan without it, Dagster executes the plan with a copy of the job matching the plan, and the two copies
kept evicting each other from Dagster's one-entry cache of the loaded job: every step loaded the code location
twice. These tests execute the plan as the task does (the job rebuilt from its dict for each step, then the copy
Dagster executes) and count the loads.
"""

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
from dagster._core.definitions.repository_definition import RepositoryLoadData
from dagster._core.execution.api import create_execution_plan

from ingestion_pipeline.runtime.dagster_internals import celery_step_plan as step_plan

LOADS: list[int] = []


@dg.op
def one() -> int:
    return 1


@dg.job
def tiny():
    one()


def code_location() -> dg.Definitions:
    LOADS.append(1)
    return dg.Definitions(jobs=[tiny])


def _a_code_servers_job() -> dict:
    """The job as the run's process sends it to a worker when a code server launched the run: with load data."""
    recon = ReconstructableRepository.for_module(__name__, "code_location").get_reconstructable_job("tiny")
    return recon.with_repository_load_data(RepositoryLoadData(code_location_name="here")).to_dict()


def _steps_loads(plan_for, steps: int = 3) -> int:
    executable = _a_code_servers_job()
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    LOADS.clear()
    for _ in range(steps):
        recon = ReconstructableJob.from_dict(executable)  # each Celery task rebuilds it
        plan = plan_for(recon)
        # what execute_plan_iterator executes: the job with the plan's load data
        executed = recon.with_repository_load_data(plan.repository_load_data)
        assert executed.get_definition().name == "tiny"
    return len(LOADS)


def test_the_steps_of_a_run_a_code_server_launched_load_its_job_once():
    assert _steps_loads(lambda recon: step_plan(recon, {}, ["one"], None)) == 1


def test_a_plan_built_as_dagster_celery_builds_it_loads_the_job_twice_a_step():
    """What the task did before (dagster-celery's own body): the measure the test above is held against."""
    loads = _steps_loads(lambda recon: create_execution_plan(recon, {}, step_keys_to_execute=["one"]))
    assert loads == 2 * 3
