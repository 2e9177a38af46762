"""A prepare's ``check_url`` is checked (form, DNS, SSRF policy) once a minute, not per prepare."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from ferry.errors import ValidationError
from ferry.gateway import transactions
from ferry.gateway.transactions import CHECKED_FOR_S, CheckedUrls, Transactions
from ferry.netguard import EndpointPolicy, IPAddress
from ferry.txnlog import TxnId


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        # (action, url, time) → what fresh() answered, in order
        ([("add", "u", 0), ("fresh", "u", 1)], [True]),
        ([("fresh", "u", 0)], [False]),
        ([("add", "u", 0), ("fresh", "u", CHECKED_FOR_S - 0.1)], [True]),
        ([("add", "u", 0), ("fresh", "u", CHECKED_FOR_S)], [False]),
        # checked again: fresh from then on
        ([("add", "u", 0), ("add", "u", 50), ("fresh", "u", CHECKED_FOR_S + 10)], [True]),
        # anything but a string is never fresh (the full check refuses it)
        ([("fresh", None, 0), ("fresh", 5, 0)], [False, False]),
    ],
)
def test_a_url_is_fresh_for_a_minute_after_it_passed(steps: list[tuple[str, Any, float]], want: list[bool]) -> None:
    now = [0.0]
    checked = CheckedUrls(clock=lambda: now[0])
    got = []
    for action, url, at in steps:
        now[0] = at
        if action == "add":
            checked.add(url)
        else:
            got.append(checked.fresh(url))
    assert got == want


def test_the_oldest_url_leaves_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "CHECKED_URLS", 2)
    checked = CheckedUrls(clock=lambda: 0.0)
    for url in ("a", "b", "a", "c"):  # "a" was checked again after "b": "b" is the oldest
        checked.add(url)
    assert [checked.fresh(u) for u in ("a", "b", "c")] == [True, False, True]


class FakeLog:
    def __init__(self) -> None:
        self.prepared: list[dict[str, Any]] = []

    async def prepare_async(self, entry: dict[str, Any]) -> TxnId:
        self.prepared.append(entry)
        return TxnId(0, len(self.prepared), "0" * 16)


async def no_write(txn_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    raise AssertionError("not called")


def test_prepares_resolve_the_check_url_once_and_refusals_every_time() -> None:
    asked: list[str] = []
    answers = {"shop.example": ["10.0.0.7"], "meta.example": ["169.254.169.254"]}

    def resolver(host: str) -> list[IPAddress]:
        asked.append(host)
        return [ipaddress.ip_address(a) for a in answers[host]]

    log = FakeLog()
    txns = Transactions(log, no_write, EndpointPolicy(resolver=resolver))  # type: ignore[arg-type]

    async def run() -> None:
        for _ in range(3):
            await txns.prepare([], "http://shop.example/check", 1000)
        for _ in range(2):
            with pytest.raises(ValidationError) as refused:
                await txns.prepare([], "http://meta.example/check", 1000)
            assert refused.value.field == "check_url" and "metadata" in str(refused.value)
        with pytest.raises(ValidationError):
            await txns.prepare([], "ftp://shop.example/check", 1000)  # another string: checked in full

    asyncio.run(run())
    assert asked == ["shop.example", "meta.example", "meta.example"]
    assert [e["check_url"] for e in log.prepared] == ["http://shop.example/check"] * 3
