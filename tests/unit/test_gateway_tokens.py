"""Who may do what with a token's scope and topic patterns (docs/contract.md §9, §11)."""

from __future__ import annotations

import pytest

from ferry.gateway.tokens import Principal

PRODUCE = Principal("p", "produce", ("orders", "billing.*"))
READ = Principal("r", "read")
ADMIN = Principal("admin", "admin")


@pytest.mark.parametrize(
    ("principal", "topic", "produce", "read"),
    [
        (PRODUCE, "orders", True, True),
        (PRODUCE, "billing.eu", True, True),
        (PRODUCE, "orders2", False, False),
        (PRODUCE, "billing", False, False),
        (READ, "orders", False, True),  # reads a transaction's state, as the portal shows it
        (ADMIN, "anything", True, True),
    ],
)
def test_produce_and_read_rights(principal: Principal, topic: str, produce: bool, read: bool) -> None:
    assert principal.may_produce(topic) is produce
    assert principal.may_read(topic) is read
