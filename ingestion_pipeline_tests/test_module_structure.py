"""The codebase's shape, checked: dependencies point one way, modules stay small, SQL stays in the domain
packages (ARCHITECTURE.md). Each test reads the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ingestion_pipeline"
# A module is as long as its one concept needs; past this, it is likely holding two
MAX_MODULE_LINES = 600
# Dagster objects, commands and the runtime hand work to the domain packages; they write no SQL of their own.
NO_SQL_PACKAGES = ("defs", "cli", "runtime")
# Only a liveness probe of a pooled connection may run a statement there (runtime/pooled_instance.py).
SQL_ALLOWED = {"runtime/pooled_instance.py"}
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
    """core <- documents, metrics <- sources <- runtime <- defs, cli, api: a package never imports one that imports
    it."""
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


# Figures live in docs/benchmarks.md: a docstring or comment says what and why and names the benchmark that measures
# a choice (a script under benchmarks/), never its numbers, which go stale. These are the shapes a measured timing
# takes in prose; a setting (a 30 s lease, every 5 s, at most 2,000 px, 200 dpi, 4 x the candidates) takes none.
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_FIGURE = rf"{_NUMBER}(?:\s*[-–]\s*{_NUMBER})?"  # one figure or a range of them
_TIME = r"(?:µs|ms|s|seconds?|minutes?|min)\b"
_WORK = r"(?:page|query|vector|check|step|file|client|batch|row|chunk|search|call|text|unit|million|version|run)s?"
MEASURED_TIMING = re.compile("|".join((
    rf"(?:~|\babout\s|\baround\s|\broughly\s|\bnearly\s)\s*{_FIGURE}\s*(?:{_TIME}|%)",  # ~0.3 s, about 45 ms, ~10 %
    rf"~\s*{_FIGURE}\s+\w+\s+(?:a|per)\s+second\b",  # ~13 sessions a second
    r"\b\d+\.\d+\s*[×x](?!\w)",  # 1.22×
    rf"\b{_FIGURE}\s*[×x]\s+(?:faster|slower|quicker|(?:its|the)\s+idle)",  # 2.5-2.7x its idle one, 3 × faster
    rf"\b{_FIGURE}\s*%\s+(?:faster|slower|quicker)",  # 10 % faster
    rf"\b{_FIGURE}\s*{_TIME}\s*(?:against|instead of|->|→)\s*{_NUMBER}",  # 210 ms instead of 18
    rf"\b{_NUMBER}\s*(?:->|→)\s*{_FIGURE}\s*{_TIME}",  # 3.50 -> 3.15 s
    rf"\bfrom\s+{_NUMBER}\s*{_TIME}\s+to\s+{_NUMBER}\s*{_TIME}",  # from 25 ms to 1.7 s
    rf"\b\d+\.\d+\s*/\s*\d+\.\d+\s*{_TIME}",  # 16.7 / 17.1 s (runs side by side)
    rf"\b{_FIGURE}\s*{_TIME}\s+(?:a|per|each)\s+{_WORK}\b",  # 0.6 ms a vector, 60-170 ms per client
    rf"\b{_FIGURE}\s*{_TIME}\s+for\s+{_NUMBER}\s+\w",  # 4 ms for 1,000 chunks
    rf"\b{_FIGURE}\s*{_TIME}\s+here\b",  # 0.7 s here
    rf"\bp(?:50|9[059])\s+{_NUMBER}\s*(?:/\s*{_NUMBER}\s*)?{_TIME}",  # p95 47 ms
    rf"\b(?:took|takes|cost|costs|spent|spends|paid|pays)\s+(?:~|about\s+)?{_FIGURE}\s*{_TIME}",  # took 52 s
    rf"\b{_FIGURE}\s*{_TIME}\s+of\s+(?:one core|CPU|load|its|every|each|starts|forks|decoding)\b",  # 0.7 s of load
)), re.IGNORECASE)
# An inline literal quotes code or output (``done in ~39 s``), not a claim about this code.
_LITERAL = re.compile(r"``[^`]*``")


def _states_a_measured_timing(text: str) -> bool:
    return MEASURED_TIMING.search(_LITERAL.sub("", text)) is not None


def _prose_lines(source: str) -> dict[int, str]:
    """Each line of a comment or a docstring (any string standing as a statement), by its number."""
    lines = source.splitlines()
    prose = {token.start[0]: token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            prose.update({n: lines[n - 1] for n in range(node.lineno, node.end_lineno + 1) if n not in prose})
    return prose


@pytest.mark.parametrize(("text", "measured"), [
    ("bcrypt is slow on purpose (~0.3 s a check at cost 12)", True),
    ("another tenant's p95 during a flood was 2.5-2.7x its idle one", True),
    ("the int8 model encoded 1.22× as fast", True),
    ("the daemon opened ~13 sessions a second idle", True),
    ("0.6 ms a vector in a small graph", True),
    ("a 2,000-row promotion took 210 ms instead of 18", True),
    ("p95 47 ms against 8 ms idle", True),
    ("(1M rows: 3.50 -> 3.15 s)", True),
    ("pandas: 0.7 s of load if imported there", True),
    ("~10 % faster than one stream over both cores", True),
    ("less than an HNSW scan (4 ms for 1,000 chunks)", True),
    ("the claim is held by a 30 s lease, renewed every 10 s", False),
    ("a page image is at most 2,000 px a side, rendered at 200 dpi", False),
    ("one thread per call (``OMP_THREAD_LIMIT=1``)", False),
    ("a request waits at most 5 s for a connection, then 503", False),
    ("waiting 5 s, 10 s, 30 s between attempts; a presigned PUT is valid 15 minutes", False),
    ("the scan's candidate list (at least; 4 x the candidates asked for, up to 1,000)", False),
    ("the planner chose a 100,000 x 100,000 nested loop", False),
    ("Dagster evaluates sensors at most every 5 s; a file waited up to 10 s for its run", False),
    ("a step is noticed within a tenth of its own duration (after a 0.3 s step, 0.03 s)", False),
    ("One line for a terminal: ``acme: 120 queued, 4 running at 3.2 files/s, done in ~39 s``", False),
    ("the benchmark that measures it: benchmarks/search_latency.py", False),
])
def test_the_timing_pattern_tells_a_measurement_from_a_setting(text: str, measured: bool) -> None:
    assert _states_a_measured_timing(text) is measured


def test_no_measured_timing_in_comments_or_docstrings() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        for number, line in sorted(_prose_lines(path.read_text()).items()):
            if _states_a_measured_timing(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert found == [], "figures live in docs/benchmarks.md; name the benchmark that measures it instead"
