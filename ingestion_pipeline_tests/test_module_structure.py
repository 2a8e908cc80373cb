"""The codebase's shape, checked: dependencies point one way, modules stay small, SQL stays in the domain
packages (ARCHITECTURE.md). Each test reads the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ingestion_pipeline"
# A module is as long as its one concept needs; past this, it is likely holding two
MAX_MODULE_LINES = 600
# Dagster objects and commands hand work to the domain packages; they write no SQL of their own.
NO_SQL_PACKAGES = ("defs", "cli")
# Only a liveness probe of a pooled connection may run a statement in defs/ (pooled_instance.py).
SQL_ALLOWED = {"defs/pooled_instance.py"}
SQL = re.compile(r"\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("ingestion_pipeline", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ingestion_pipeline"):
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.append(submodule if submodule in modules else node.module)
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names if alias.name.startswith("ingestion_pipeline")]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_import_cycle() -> None:
    assert _cycles(_import_graph()) == []


def test_no_package_import_cycle() -> None:
    """core <- documents, metrics <- sources <- defs, cli, api: a package never imports one that imports it."""
    packages: dict[str, set[str]] = {}
    for module, targets in _import_graph().items():
        packages.setdefault(_package_of(module), set()).update(
            _package_of(t) for t in targets if _package_of(t) != _package_of(module))
    assert _cycles(packages) == []


def test_the_checker_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_over_the_line_limit() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


@pytest.mark.parametrize("package", NO_SQL_PACKAGES)
def test_no_sql_outside_the_domain_packages(package: str) -> None:
    offenders = []
    for path in (PACKAGE / package).rglob("*.py"):
        if str(path.relative_to(PACKAGE)) in SQL_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


# Work history (a numbered stop or issue) means nothing to a reader of the product: it speaks of itself only.
WORK_HISTORY = re.compile(r"\b(stop|issue)\s+#?\d+\b", re.IGNORECASE)
PRODUCT_TEXT = ("ingestion_pipeline", "ingestion_pipeline_tests", "benchmarks", "scripts", "docs", "sql", "deploy",
                "dagster_home", "README.md", "ARCHITECTURE.md", "Makefile", "docker-compose.yml", "pyproject.toml")


def test_no_work_history_in_code_or_docs() -> None:
    root = PACKAGE.parent
    found = []
    for top in PRODUCT_TEXT:
        paths = [root / top] if (root / top).is_file() else sorted((root / top).rglob("*"))
        for path in paths:
            if path.suffix not in (".py", ".md", ".sql", ".yaml", ".yml", ".toml", "") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if WORK_HISTORY.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:100]}")
    assert found == []
