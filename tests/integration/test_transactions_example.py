"""examples/transactional_producer.py on the real stack (a gateway, a worker running the back-checks,
the coordinator): an order's event is in Kafka exactly when the order is in the shop's database —
whether the shop finishes the steps itself, its local transaction fails, or it dies after the
prepare or after its local commit and the back-check asks it once it is back."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ferry import kafka
from ferry.devstack.embedded import ServiceProcess, free_port
from tests.support.gateway import ADMIN, client
from tests.support.kafka import create_topic
from tests.support.txn_stack import Stack, running
from tests.support.wait import until

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transactional_producer.py"


@pytest.fixture()
def txn_stack(tmp_path: Path, zk_connect: str, kafka_bootstrap: str) -> Iterator[Stack]:
    # Checks go on while the shop restarts: more than the suite's usual 3 before a rollback.
    with running(tmp_path, zk_connect, kafka_bootstrap, FERRY_TXN_MAX_CHECKS="10") as st:
        yield st


def test_the_example_shop_publishes_exactly_its_committed_orders(
    txn_stack: Stack, tmp_path: Path, kafka_bootstrap: str, topic_name: str
) -> None:
    txn_stack.c.worker("w0").wait_ready(60)
    gateway = txn_stack.gateway("g1")
    create_topic(kafka_bootstrap, topic_name, 2)
    port, db = free_port(), tmp_path / "shop.sqlite"
    log = tmp_path / "shop.log"
    runs: list[ServiceProcess] = []

    def shop(*extra: str) -> ServiceProcess:
        argv = [sys.executable, str(EXAMPLE), "--gateway", f"http://127.0.0.1:{gateway.port}", "--token", ADMIN]  # type: ignore[attr-defined]
        argv += ["--db", str(db), "--port", str(port), "--topic", topic_name, "--timeout-ms", "1500", *extra]
        proc = ServiceProcess("shop", argv, port, log).start()
        runs.append(proc)
        return proc.wait_ready(30)

    def order(customer: str, amount: float) -> httpx.Response:
        return httpx.post(f"http://127.0.0.1:{port}/orders", json={"customer": customer, "amount": amount}, timeout=30)

    def dying_words() -> dict[str, str]:
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        return {line["after"]: line["transaction"] for line in lines if line["event"] == "shop.dying"}

    def state(txn: str) -> str:
        with client(gateway) as c:
            return str(c.get(f"/api/v1/transactions/{txn}").json()["state"])

    try:
        # The shop does every step itself; a refused order (the database's CHECK) is rolled back.
        first = shop()
        placed = order("c-1", 25.5)
        assert placed.status_code == 201, placed.text
        refused = order("c-2", -1)
        assert refused.status_code == 422, refused.text
        assert state(refused.json()["transaction"]) == "rolled_back"
        first.stop()

        # Dies after its local commit (the order is stored, so the back-check hears "commit"), or
        # after the prepare (no order: "rollback"); the back-check asks the shop once it is back.
        decided: dict[str, str] = {}
        for point, customer, outcome in (("local-commit", "c-3", "committed"), ("prepare", "c-4", "rolled_back")):
            shop("--die-after", point)
            with pytest.raises(httpx.HTTPError):
                order(customer, 12.0)
            shop()
            decided[point] = txn = dying_words()[point]
            until(lambda t=txn, o=outcome: state(t) == o, timeout_s=60, what=f"the back-check: {customer} {outcome}")
            runs[-1].stop()
        stored = decided["local-commit"]
    finally:
        for proc in runs:
            proc.stop()

    with sqlite3.connect(db) as conn:
        in_db = {c for (c,) in conn.execute("SELECT customer FROM orders")}
        txns = {t for (t,) in conn.execute("SELECT id FROM ferry_transactions")}
    assert in_db == {"c-1", "c-3"}
    assert txns == {placed.json()["transaction"], stored}
    events: list[tuple[str, str]] = []

    def take(m) -> None:  # type: ignore[no-untyped-def]
        events.append((json.loads(m.value())["customer"], dict(m.headers())["ferry-transaction-id"].decode()))

    kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, topic_name, take)
    # Each committed order's event at least once, with its transaction's id; nothing else.
    assert {c for c, _ in events} == {"c-1", "c-3"}
    assert {t for _, t in events} == txns
