"""Each constant is defined once in Python; the schema's CHECK constraints and the CLI follow it."""

import re

from ingestion_pipeline.cli import build_parser
from ingestion_pipeline.core.identifiers import IDENTIFIER_PATTERN, key_part, validate_identifier
from ingestion_pipeline.metrics.formats import METRIC_FORMATS, PLATFORMS


def _check(db, table: str, column: str) -> str:
    rows = db.execute(
        """SELECT pg_get_constraintdef(c.oid) AS def FROM pg_constraint c
            WHERE c.conrelid = %s::regclass AND c.contype = 'c'""",
        (table,),
    ).fetchall()
    [definition] = [r["def"] for r in rows if re.search(rf"\b{column}\b", r["def"])]
    return definition


def _listed(definition: str) -> set[str]:
    return set(re.findall(r"'([^']+)'::text", definition))


def test_platforms_and_formats_match_the_schema(db):
    assert _listed(_check(db, "data_uploads", "platform")) == set(PLATFORMS)
    assert _listed(_check(db, "ingestion_sources", "platform")) == set(PLATFORMS)
    assert _listed(_check(db, "data_uploads", "file_format")) == set(METRIC_FORMATS.values())


def test_identifier_rule_matches_the_schema(db):
    for table, column in (("tenants", "tenant_id"), ("ingestion_sources", "name"), ("data_uploads", "workspace_id")):
        assert IDENTIFIER_PATTERN in _check(db, table, column), (table, column)


def test_cli_choices_come_from_the_constants():
    def platform_choices(*path: str) -> tuple:
        parser = build_parser()
        for name in path:
            parser = parser._subparsers._group_actions[0].choices[name]
        [platform] = [a for a in parser._actions if a.dest == "platform"]
        return tuple(platform.choices)

    assert platform_choices("metrics", "submit") == PLATFORMS
    assert platform_choices("source", "add") == PLATFORMS


def test_keys_and_identifiers():
    assert key_part("Acme.Corp/EU") == "acme-corp-eu"
    assert validate_identifier("acme-1", "tenant id") == "acme-1"


def test_roles_and_api_choices_match(db):
    from typing import get_args

    from ingestion_pipeline.api.schemas import SourceIn, UserIn
    from ingestion_pipeline.core.users import ROLES

    assert _listed(_check(db, "users", "role")) == set(ROLES)
    assert set(get_args(UserIn.model_fields["role"].annotation)) == set(ROLES)
    [literal] = [a for a in get_args(SourceIn.model_fields["platform"].annotation) if a is not type(None)]
    assert set(get_args(literal)) == set(PLATFORMS)
