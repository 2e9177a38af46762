"""Every client command the parser knows is dispatched to the client, and nothing else is."""

from __future__ import annotations

import argparse

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
