"""What the runtime uses of Dagster and dagster-celery beyond their documented API (``runtime/dagster_internals.py``),
each exercised on a toy job with Dagster alone.

``make test-dagster-next`` runs this module, and only it, against the newest Dagster 1.13 on the package index (a
virtualenv of Dagster, dagster-celery and pytest; no conftest): a release that moves one of them fails here by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg

from ingestion_pipeline.runtime import dagster_internals


@dg.op
def say_hello() -> str:
    print("hello from the step")  # noqa: T201 - the captured output the compute log keeps
    return "hello"


@dg.job
def toy_job() -> None:
    say_hello()


def _run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    """A run of ``toy_job`` as a launcher creates it: with the job's code origin, so a worker can load it."""
    return instance.create_run_for_job(toy_job, job_code_origin=dg.reconstructable(toy_job).get_python_origin())


def test_a_run_worker_executes_a_launched_run_as_dagster_api_execute_run_does():
    with dg.instance_for_test() as instance:
        run = _run(instance)
        dagster_internals.execute_run(run.run_id, instance)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS


def test_an_instances_storages_pool_their_connections_and_close_them():
    with dg.instance_for_test() as instance:
        dagster_internals.pool_storage_connections(instance)
        for name in ("_run_storage", "_event_storage", "_schedule_storage"):
            assert hasattr(instance, name), f"DagsterInstance.{name} is gone: close_storage_connections needs it"
        dagster_internals.close_storage_connections(instance)
        assert instance.get_runs() == []  # a later query opens anew


def test_a_custom_instance_class_gets_dagsters_defaults_for_the_instances_parts(tmp_path):
    defaults = dagster_internals.instance_config_defaults(str(tmp_path))
    assert {"run_storage", "event_log_storage", "compute_logs", "run_launcher"} <= set(defaults)


def test_the_janitor_marks_a_run_failed_with_its_reason():
    with dg.instance_for_test() as instance:
        run = _run(instance)
        dagster_internals.mark_run_failed(instance, run, "the run worker is lost")
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        messages = [r.event_log_entry.message for r in instance.get_records_for_run(run.run_id).records]
        assert any("the run worker is lost" in m for m in messages)


def test_a_dead_runs_pool_slots_are_given_back():
    with dg.instance_for_test() as instance:
        run = _run(instance)
        storage = instance.event_log_storage
        storage.set_concurrency_slots("toy_pool", 1)
        assert storage.claim_concurrency_slot("toy_pool", run.run_id, "say_hello").is_claimed
        dagster_internals.free_pool_slots(instance, run.run_id)
        assert storage.get_concurrency_info("toy_pool").claimed_slots == []


def test_checks_partitioned_like_their_asset_give_one_result_per_partition_also_run_alone():
    """What the batch checks rely on (``defs/documents/batch_checks.py``), a preview of Dagster 1.13: check specs
    with the asset's partitions, evaluated per partition in the asset's run and in a run of the checks alone."""
    import warnings

    batches = dg.DynamicPartitionsDefinition(name="toy_batches")

    @dg.asset(partitions_def=batches)
    def toy_asset() -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        specs = [dg.AssetCheckSpec(name, asset="toy_asset", partitions_def=batches) for name in ("a", "b")]

    @dg.multi_asset_check(specs=specs, can_subset=True)
    def toy_checks(context):  # (annotations are strings in this module: Dagster reads the parameter by name)
        for key in context.selected_asset_check_keys:
            yield dg.AssetCheckResult(check_name=key.name, asset_key=key.asset_key, passed=True,
                                      metadata={"batch": context.op_execution_context.partition_key})

    job = dg.Definitions(assets=[toy_asset], asset_checks=[toy_checks],
                         jobs=[dg.define_asset_job("toy", selection=[toy_asset])]).resolve_job_def("toy")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("toy_batches", ["one", "two"])
        for key in ("one", "two"):
            evaluations = job.execute_in_process(partition_key=key, instance=instance).get_asset_check_evaluations()
            assert sorted((e.check_name, e.partition, e.metadata["batch"].value) for e in evaluations) == [
                ("a", key, key), ("b", key, key)]
        alone = job.get_subset(asset_selection=set(), asset_check_selection={specs[0].key})
        result = alone.execute_in_process(instance=instance, tags={"dagster/partition": "one"})
        assert [(e.check_name, e.partition) for e in result.get_asset_check_evaluations()] == [("a", "one")]


REACHED_THROUGH_THE_ADAPTER = {"report_run_failed", "free_concurrency_slots_for_run", "optimize_for_webserver",
                               "_execute_run_command_body",
                               "_run_storage", "_event_storage", "_schedule_storage", "core_execution_loop",
                               "TICK_SECONDS"}


def _reaches_into_dagster(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = []
        if any(n.startswith("dagster._") or n.endswith("core_execution_loop") for n in names) or (
                isinstance(node, ast.Attribute) and node.attr in REACHED_THROUGH_THE_ADAPTER):
            lines.append(node.lineno)
    return lines


def test_no_other_module_of_the_package_reaches_into_dagster():
    """The adapter is the only way in: no other module imports ``dagster._…`` or dagster-celery's loop module, or
    uses what the adapter wraps."""
    package = Path(dagster_internals.__file__).parents[1]
    reached = [f"{path.relative_to(package)}:{line}" for path in sorted(package.rglob("*.py"))
               if path.name != "dagster_internals.py"
               for line in _reaches_into_dagster(ast.parse(path.read_text(encoding="utf-8")))]
    assert reached == []


def test_the_checker_sees_each_way_in():
    source = ("from dagster._core.events import X\nimport dagster._cli\n"
              "from dagster_celery import core_execution_loop\ninstance.report_run_failed(run, m)\n"
              "instance._run_storage\nloop.TICK_SECONDS = 1\n"
              "instance.report_engine_event(m, run)\n")
    assert sorted(_reaches_into_dagster(ast.parse(source))) == [1, 2, 3, 4, 5, 6]


def test_the_adapter_imports_only_the_three_private_names_it_documents():
    """What the adapter imports of ``dagster._…`` is the short list ARCHITECTURE.md names (the run worker's body of
    `dagster api execute_run` and its signal handling, and the defaults a custom instance class must give): a new
    private import is a decision to write down there first."""
    tree = ast.parse(Path(dagster_internals.__file__).read_text(encoding="utf-8"))
    private = sorted(f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     and (node.module or "").startswith("dagster._") for alias in node.names)
    assert private == ["dagster._cli.api._execute_run_command_body", "dagster._core.instance.ref.InstanceRef",
                       "dagster._utils.interrupts.capture_interrupts"]
