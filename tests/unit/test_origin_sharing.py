"""The leader's count of workers pushing to each adaptive endpoint origin (coordinator.sharing)."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.coordinator.sharing import origin_sharing
from ferry.subscription import PartitionRef, Subscription, parse


def sub(name: str, url: str, adaptive: bool = True) -> Subscription:
    doc: dict[str, Any] = {"name": name, "topics": ["t"], "endpoint": {"url": url}}
    if adaptive:
        doc["concurrency"] = {"mode": "adaptive"}
    return parse(doc)


SUBS = {
    "a": sub("a", "http://billing:8080/hook"),
    "b": sub("b", "http://billing:8080/other"),  # the same origin as a
    "c": sub("c", "https://mail/x"),
    "fixed": sub("fixed", "http://billing:8080/hook", adaptive=False),
}


def refs(*names: str) -> list[PartitionRef]:
    return [PartitionRef(n, "t", i) for i, n in enumerate(names)]


@pytest.mark.parametrize(
    ("name", "plan", "expected"),
    [
        ("one worker", {"w1": refs("a", "a")}, {"w1": {"http://billing:8080": 1}}),
        (
            "two workers, one origin",
            {"w1": refs("a"), "w2": refs("a")},
            {"w1": {"http://billing:8080": 2}, "w2": {"http://billing:8080": 2}},
        ),
        (
            "two subscriptions to one origin count one worker once",
            {"w1": refs("a", "b"), "w2": refs("b")},
            {"w1": {"http://billing:8080": 2}, "w2": {"http://billing:8080": 2}},
        ),
        (
            "origins counted apart; the port is spelled out",
            {"w1": refs("a", "c"), "w2": refs("c"), "w3": refs("c")},
            {
                "w1": {"http://billing:8080": 1, "https://mail:443": 3},
                "w2": {"https://mail:443": 3},
                "w3": {"https://mail:443": 3},
            },
        ),
        (
            "a fixed subscription does not count",
            {"w1": refs("a"), "w2": refs("fixed"), "w3": []},
            {"w1": {"http://billing:8080": 1}, "w2": {}, "w3": {}},
        ),
        ("a subscription no longer known is skipped", {"w1": refs("gone")}, {"w1": {}}),
    ],
)
def test_workers_per_origin(
    name: str, plan: dict[str, list[PartitionRef]], expected: dict[str, dict[str, int]]
) -> None:
    assert origin_sharing(plan, SUBS) == expected, name
