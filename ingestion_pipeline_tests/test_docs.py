"""The docs a newcomer reads: the README stays short, every relative link resolves, and every command the
README shows is one the project has (the CLI's own parser accepts it, the make target and script exist)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ingestion_pipeline import read
from ingestion_pipeline.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted([README, ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _code_lines(markdown: str) -> list[str]:
    """The lines of indented and fenced code blocks."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            lines.append(line.strip())
    return lines


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (pipes, ``&&``, ``;`` and a trailing ``&`` split off; comments dropped)."""
    line = re.sub(r"\s#\s.*$", "", line).rstrip(" \\")
    if "$(" in line and not line.startswith(("export", ".venv", "make")):
        line = line.split("$(", 1)[1]
    commands = []
    for part in re.split(r"\|\||&&|;|\|", line):
        part = part.strip().rstrip("&").strip()
        if part:
            try:
                commands.append(shlex.split(part))
            except ValueError:  # a quoted argument continued on the next line (curl -d '...')
                commands.append(part.split())
    return commands


def test_the_readme_is_short():
    assert README.stat().st_size < 10 * 1024, f"README.md is {README.stat().st_size} bytes: move detail into docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}, which does not exist"
        assert ROOT in path.parents, f"{doc.relative_to(ROOT)} links outside the project: {target}"


def test_every_command_in_the_readme_exists():
    parser = build_parser()
    make_targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    checked = 0
    for line in _code_lines(README.read_text()):
        for argv in _commands(line):
            program, args = argv[0], argv[1:]
            if program.endswith("ingestion-pipeline"):
                try:
                    parser.parse_args(args)
                except SystemExit:
                    pytest.fail(f"the README shows a command the CLI refuses: {line}")
                checked += 1
            elif program == "make":
                assert args and args[0] in make_targets, f"no make target for: {line}"
                checked += 1
            elif program.endswith("/python") and args and args[0].endswith(".py"):
                assert (ROOT / args[0]).is_file(), f"no script {args[0]}: {line}"
                checked += 1
        for name in re.findall(r"\bread\.(\w+)\(", line):
            assert callable(getattr(read, name, None)), f"ingestion_pipeline.read has no {name}: {line}"
            checked += 1
    assert checked >= 10  # the tour is there and was read


def _variables_read_by_the_package() -> set[str]:
    """Every environment variable name the package's code spells out as a string."""
    import ast

    pattern = re.compile(r"^(INGESTION_[A-Z0-9_]+|JWT_[A-Z_]+|AUTH_ENABLED|DATABASE_URL|DAGSTER_PG_URL|DAGSTER_HOME"
                         r"|DO_NOT_TRACK|REDIS_URL|CELERY_BROKER_URL)$")
    found = set()
    for path in (ROOT / "ingestion_pipeline").rglob("*.py"):
        if path.name == "environment.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
                found.add(node.value)
    return found


def test_the_configuration_page_is_generated_from_the_code_and_lists_every_variable_it_reads():
    from ingestion_pipeline.core import environment

    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == environment.markdown(), "regenerate: python -m ingestion_pipeline.core.environment"
    read_by_code = _variables_read_by_the_package()
    assert read_by_code - environment.names() == set(), "read by the code, missing from the configuration page"
    assert environment.names() - read_by_code == set(), "on the configuration page, read by no code"
