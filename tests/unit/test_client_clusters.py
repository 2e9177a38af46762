"""``--cluster`` of the client commands reaches the API as docs/zones.md says (no server needed)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ferry.client import commands


class Recorder:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, Any, dict[str, Any]]] = []

    def call(self, method: str, path: str, *, body: Any = None, gateway: bool = False, **params: Any) -> Any:
        self.calls.append((method, path, body, params))
        return self.answer


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    commands.add_parsers(p.add_subparsers(dest="command"))
    return p.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "answer", "call"),
    [
        (
            ["trace", "orders/3/7", "-s", "billing", "--cluster", "dc2", "-o", "json"],
            {"state": "delivered", "cluster": "dc2"},
            ("GET", "/api/v1/subscriptions/billing/records/orders/3/7", None, {"cluster": "dc2"}),
        ),
        (
            ["trace", "orders/3/7", "-s", "billing", "-o", "json"],
            {"state": "delivered", "cluster": "default"},
            ("GET", "/api/v1/subscriptions/billing/records/orders/3/7", None, {"cluster": None}),
        ),
        (
            ["dead-letters", "list", "billing", "--cluster", "dc2", "-o", "json"],
            {"dead_letters": []},
            ("GET", "/api/v1/subscriptions/billing/dead-letters", None, {"limit": 100, "cluster": "dc2"}),
        ),
        (
            ["dead-letters", "redrive", "billing", "--cluster", "dc2", "-o", "json"],
            {"replayed": 1},
            ("POST", "/api/v1/subscriptions/billing/dead-letters/replay", {"limit": 100, "cluster": "dc2"}, {}),
        ),
        (
            ["dead-letters", "redrive", "billing", "-o", "json"],
            {"replayed": 0},
            ("POST", "/api/v1/subscriptions/billing/dead-letters/replay", {"limit": 100}, {}),
        ),
        (
            ["subscriptions", "reset", "billing", "--to", "latest", "--cluster", "dc2", "-o", "json"],
            {"name": "billing", "to": "latest", "cluster": "dc2", "partitions": []},
            ("POST", "/api/v1/subscriptions/billing/reset", {"to": "latest", "cluster": "dc2"}, {}),
        ),
        (
            ["subscriptions", "reset", "billing", "--to", "latest", "-o", "json"],
            {"name": "billing", "to": "latest", "partitions": []},
            ("POST", "/api/v1/subscriptions/billing/reset", {"to": "latest"}, {}),
        ),
    ],
)
def test_cluster_option(argv: list[str], answer: dict[str, Any], call: tuple[Any, ...], capsys: Any) -> None:
    args = parse(*argv)
    client = Recorder(answer)
    handler = {
        "trace": commands.trace,
        "dead-letters": commands.dead_letters,
        "subscriptions": commands.subscriptions,
    }[args.command]
    assert handler(client, args) == 0  # type: ignore[arg-type]
    assert client.calls == [call]
    assert capsys.readouterr().out.strip()
