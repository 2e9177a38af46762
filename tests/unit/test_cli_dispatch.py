"""The console script's parser: client commands dispatched from one table, settings options."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ferry import cli
from ferry.client import commands


def _client_parsers() -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    commands.add_parsers(sub)
    return set(sub.choices)


def test_every_client_parser_has_a_handler() -> None:
    assert _client_parsers() == commands.NAMES
    assert commands.NAMES - set(commands.HANDLERS) == {"login"}


def test_service_commands_are_not_client_commands() -> None:
    parser = cli._parser()
    services = {"dev", "coordinator", "worker", "portal", "gateway", "migrate", "replay", "config"}
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(action.choices) == services | commands.NAMES
    assert not services & commands.NAMES


def test_config_may_follow_the_command() -> None:
    parser = cli._parser()
    assert parser.parse_args(["worker", "--config", "f.toml"]).config == "f.toml"
    assert parser.parse_args(["--config", "f.toml", "worker"]).config == "f.toml"
    assert parser.parse_args(["worker"]).config is None


def test_config_shows_how_the_worker_id_is_made() -> None:
    from ferry import config

    assert config.describe(config.load(env={}))["FERRY_WORKER_ID"].endswith("-<pid>")
    assert config.describe(config.load(env={"FERRY_WORKER_ID": "w1"}))["FERRY_WORKER_ID"] == "w1"


class _Portal:
    """A client whose portal answers one status document."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    def call(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/api/v1/subscriptions/s/status")
        return self.status


def _row(cluster: str, partition: int) -> dict[str, Any]:
    return {"topic": "a", "partition": partition, "cluster": cluster, "worker": "w", "committed": 1}


def test_status_shows_the_cluster_column_only_with_several_clusters(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(action="status", name="s", output="table")
    commands.subscriptions(_Portal({"partitions": [_row("default", 0)]}), args)  # type: ignore[arg-type]
    assert capsys.readouterr().out.split()[0] == "TOPIC"
    commands.subscriptions(_Portal({"partitions": [_row("default", 0), _row("dc2", 0)]}), args)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["CLUSTER", "TOPIC"] and [ln.split()[0] for ln in lines[1:3]] == ["default", "dc2"]
