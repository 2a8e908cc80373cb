"""The code location: every module under ``defs/`` registers its objects with ``@dg.definitions``.

The modules are found and merged here, not by ``dg.load_from_defs_folder``. That loader also imports
every installed Dagster library that registers components (dagster-aws's Athena, Secrets Manager, …)
and snapshots their types as JSON for the UI's component catalog: 1.9 s in every process that loads the
code location (each CLI command and each run worker), for a catalog this project does not use (it has
no YAML components). What is found is the same: ``test_code_location.py`` compares the two.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import dagster as dg
from dagster.components.definitions import LazyDefinitions

import ingestion_pipeline.defs as defs_package


def defs_modules() -> Iterator[ModuleType]:
    """Every module of the ``defs`` package, sub-packages included, imported."""
    for found in pkgutil.walk_packages(defs_package.__path__, f"{defs_package.__name__}."):
        yield importlib.import_module(found.name)


def module_definitions(module: ModuleType) -> list[dg.Definitions]:
    """The Definitions a module declares: its ``@dg.definitions`` functions, called, and its ``Definitions``
    objects (as Dagster's loader takes them), not a function it imported from another module."""
    found = []
    for value in vars(module).values():
        if isinstance(value, LazyDefinitions) and value.load_fn.__module__ == module.__name__:
            found.append(value())
        elif isinstance(value, dg.Definitions):
            found.append(value)
    return found


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(
        *(definitions for module in defs_modules() for definitions in module_definitions(module)),
        # What the UI launches on selected assets (a materialisation, a backfill) runs every step in one
        # process too, as the two jobs do: the model loads once per run, not once per step.
        dg.Definitions(executor=dg.in_process_executor),
    )
