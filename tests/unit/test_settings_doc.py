"""The settings table in docs/operations.md is the settings tree, rendered; no page names a
setting that does not exist."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ferry import config, settings_doc

ROOT = Path(__file__).resolve().parents[2]

NOT_SETTINGS = {
    "FERRY_URL": "the CLI's portal address (docs/cli.md)",
    "FERRY_TOKEN": "the CLI's API token (docs/cli.md)",
    "FERRY_GATEWAY_URL": "the CLI's gateway address (docs/cli.md)",
    "FERRY_X": "the placeholder in the operations page's sentence about ferry.toml keys",
    "FERRY_TEST_KAFKA_BOOTSTRAP": "tests: an outside broker instead of the embedded one",
    "FERRY_SCREENSHOTS": "tests: where the UI test saves its screenshots",
    "FERRY_BENCH_PROFILE": "bench: the profile the scripts run",
    "FERRY_BENCH_RESULTS": "bench: where a run writes its figures (docs/development.md)",
    "FERRY_CHAOS_ROUNDS": "chaos: rounds per scenario",
    "FERRY_CHAOS_REPORT": "chaos: where the report is written",
}
"""Environment variables the pages may name that are not settings of the services."""


def test_the_operations_page_holds_the_rendered_table() -> None:
    page = settings_doc.PAGE.read_text()
    assert settings_doc.splice(page, settings_doc.render()) == page, "run: python3 -m ferry.settings_doc"


def test_every_setting_has_one_row_with_its_default() -> None:
    table = settings_doc.render()
    rows = [line for line in table.splitlines() if line.startswith("| `FERRY_")]
    assert [row.split("`")[1] for row in rows] == [s.env for s in config.SETTINGS]
    by_env = {row.split("`")[1]: row for row in rows}
    assert "| `FERRY_PREFETCH_BYTES` | 16 MiB |" in by_env["FERRY_PREFETCH_BYTES"]
    assert "| `FERRY_NATIVE` | `true` |" in by_env["FERRY_NATIVE"]
    assert "| `FERRY_ENDPOINT_ALLOW` | empty |" in by_env["FERRY_ENDPOINT_ALLOW"]
    assert "| `FERRY_ZK_SESSION_TIMEOUT_MS` | `10000` |" in by_env["FERRY_ZK_SESSION_TIMEOUT_MS"]
    secret = {s.env for s in config.SETTINGS if s.secret}
    assert {env for env, row in by_env.items() if "*Secret" in row} == secret
    assert {"FERRY_DB_URL", "FERRY_ADMIN_TOKEN", "FERRY_KAFKA_CONFIG", "FERRY_KAFKA_CLUSTERS"} <= secret


@pytest.mark.parametrize(
    ("doc", "cell"),
    [
        ("Port of the ``/metrics``\n    server.", "Port of the `/metrics` server."),
        ("See docs/zones.md for zones.", "See [zones.md](zones.md) for zones."),
        ("Read by :meth:`for_cluster`.", "Read by `for_cluster`."),
        ("``a|b``", "`a\\|b`"),
    ],
)
def test_a_docstring_becomes_one_table_cell(doc: str, cell: str) -> None:
    assert settings_doc.markdown(doc) == cell


def test_every_setting_field_has_a_docstring() -> None:
    docs = settings_doc.field_docs()
    missing = [s.env for s in config.SETTINGS if s.declared is None or (s.owner, s.declared.name) not in docs]
    assert missing == []


def test_the_table_is_derived_from_the_fields_so_a_new_field_is_a_new_setting() -> None:
    envs = [s.env for s in config.SETTINGS]
    assert len(envs) == len(set(envs))
    for s in config.SETTINGS:
        assert config.value(s.env, env={}) == _default(s.path)


def test_value_parses_one_setting_from_the_environment() -> None:
    assert config.value("FERRY_NATIVE", env={"FERRY_NATIVE": "off"}) is False
    assert config.value("FERRY_SPARK_SHUFFLE_PARTITIONS", env={"FERRY_SPARK_SHUFFLE_PARTITIONS": "16"}) == 16
    with pytest.raises(config.ConfigError, match="FERRY_NATIVE"):
        config.value("FERRY_NATIVE", env={"FERRY_NATIVE": "maybe"})


def test_pages_name_only_settings_or_known_client_variables() -> None:
    known = {s.env for s in config.SETTINGS} | set(NOT_SETTINGS)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "helm").rglob("*.yaml"))]
    unknown = {
        f"{page.relative_to(ROOT)}: {name}"
        for page in pages
        for name in re.findall(r"\bFERRY_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())
        if name not in known
    }
    assert unknown == set()


def _default(path: str) -> object:
    node: object = config.Settings()
    for part in path.split("."):
        node = getattr(node, part)
    return node if not dataclasses.is_dataclass(node) else None
