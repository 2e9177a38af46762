"""Transactions under kill -9 on the real stack (docs/transactions.md): two gateways, two workers
running the back-checks, the coordinator; ZooKeeper, the broker and MariaDB-free SQLite are real.

- A gateway killed between prepare and commit: the other gateway commits; transactions nobody
  decides are resolved by the back-check, also those whose log partition's worker is killed -9
  (the other worker takes the partition over and checks them).
- A gateway killed while writing a committed transaction's records: the next commit request, on the
  other gateway, writes them again (at least once) and the transaction ends committed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from ferry import internal, kafka
from ferry.txnlog import parse_id
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.gateway import ADMIN, client
from tests.support.kafka import create_topic
from tests.support.txn_stack import Stack
from tests.support.wait import until

pytestmark = pytest.mark.integration


def read(bootstrap: str, topic: str) -> list:  # type: ignore[type-arg]
    out = []
    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, out.append)
    return out


def test_killed_gateway_and_killed_check_worker(
    txn_stack: Stack, kafka_bootstrap: str, topic_name: str, endpoint: EndpointRecorder
) -> None:
    workers = {n: txn_stack.c.worker(n) for n in ("w0", "w1")}
    for w in workers.values():
        w.wait_ready(60)
    # The planner balances all partitions over the workers, not each kind of work: whichever
    # worker holds back-check partitions once both run is the one killed.
    until(
        lambda: (
            len(txn_stack.txn_owners()) == internal.TXN_PARTITIONS and len({*txn_stack.c.assignment().values()}) == 2
        ),
        timeout_s=30,
        what="both workers given work, the back-checks among it",
    )
    create_topic(kafka_bootstrap, topic_name, 3)
    wanted: dict[str, str] = {}  # transaction id → what its producer answers a check

    def answer(r: Received) -> Reply:
        state = wanted.get(r.headers.get("ferry-transaction-id", ""), "unknown")
        return Reply(200, {"Content-Type": "application/json"}, json.dumps({"state": state}).encode())

    endpoint.script = answer
    g1, g2 = txn_stack.gateway("g1"), txn_stack.gateway("g2")
    ids: list[str] = []
    with client(g1) as c:
        for i in range(24):
            body = {
                "records": [{"topic": topic_name, "key": f"t{i}", "value": f"v{i}-{j}"} for j in range(3)],
                "check_url": endpoint.url + "/check",
                "timeout_ms": 4000,
            }
            r = c.post("/api/v1/transactions", json=body)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
    # Every third is committed by its producer through the other gateway; the rest are left to the
    # back-check, which hears commit or rollback.
    explicit = ids[::3]
    for i, tid in enumerate(ids):
        if tid not in explicit:
            wanted[tid] = "commit" if i % 2 else "rollback"
    owners = txn_stack.txn_owners()
    held = Counter(owners.values())
    victim, survivor = ("w0", "w1") if held["w0"] >= held["w1"] else ("w1", "w0")
    victim_parts = {p for p, w in owners.items() if w == victim}
    on_victim = [t for t in ids if parse_id(t).partition in victim_parts and t not in explicit]  # type: ignore[union-attr]
    assert on_victim, "no undecided transaction on the killed worker's log partitions: the test would prove nothing"
    g1.kill()  # between prepare and commit
    workers[victim].kill()  # before any check is due
    with client(g2) as c:
        for tid in explicit:
            r = c.post(f"/api/v1/transactions/{tid}/commit")
            assert (r.status_code, r.json()["state"]) == (200, "committed"), r.text

        def states() -> Counter[str] | None:
            got = Counter(c.get(f"/api/v1/transactions/{t}").json()["state"] for t in ids)
            return got if got["prepared"] == 0 and got["committing"] == 0 else None

        final = until(states, timeout_s=60, what="every transaction decided, the victim's by the survivor")
        answer_of = {t: ("commit" if t in explicit else wanted[t]) for t in ids}
        for tid in ids:
            expected = "committed" if answer_of[tid] == "commit" else "rolled_back"
            assert c.get(f"/api/v1/transactions/{tid}").json()["state"] == expected, tid
    assert final == Counter(committed=sum(a == "commit" for a in answer_of.values()), rolled_back=8)
    assert set(txn_stack.txn_owners().values()) == {survivor}
    # Committed records visible (each at least once), rolled-back ones never.
    seen = Counter(dict(m.headers())["ferry-transaction-id"].decode() for m in read(kafka_bootstrap, topic_name))
    for tid, verb in answer_of.items():
        assert (seen[tid] >= 3) if verb == "commit" else (seen[tid] == 0), (tid, verb, seen[tid])
    asked = {r.headers.get("ferry-transaction-id") for r in endpoint.snapshot()}
    assert set(on_victim) <= asked, "a transaction of the killed worker's partitions was never checked"


def test_gateway_killed_while_writing_a_commit(txn_stack: Stack, kafka_bootstrap: str, topic_name: str) -> None:
    txn_stack.c.worker("w0").wait_ready(60)
    create_topic(kafka_bootstrap, topic_name, 3)
    g1, g2 = txn_stack.gateway("g1"), txn_stack.gateway("g2")
    n = 5_000
    records = [{"topic": topic_name, "key": f"k{i % 50}", "value": "x" * 20} for i in range(n)]
    body = {"records": records, "check_url": "http://127.0.0.1:9/", "timeout_ms": 600_000}
    with client(g1) as c:
        # More than the brokers take in one log entry: refused at once with what to change.
        big = {**body, "records": [{**rec, "value": "y" * 120} for rec in records]}
        refused = c.post("/api/v1/transactions", json=big)
        assert (refused.status_code, refused.json()["field"]) == (413, "records"), refused.text
        assert "message.max.bytes" in refused.json()["error"]
        r = c.post("/api/v1/transactions", json=body)
        assert r.status_code == 201, r.text
        tid = r.json()["id"]

    def commit() -> None:
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{g1.port}", timeout=60) as h:  # type: ignore[attr-defined]
                h.post(f"/api/v1/transactions/{tid}/commit", headers={"Authorization": f"Bearer {ADMIN}"})
        except httpx.HTTPError:
            pass  # killed mid-answer: expected

    # Kill g1 the moment its commit decision is in the log: between the decision and the records.
    where = parse_id(tid)
    assert where is not None
    fast = {"fetch.wait.max.ms": 1, "enable.partition.eof": False}
    watch = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "txn-watch", **fast})
    watch.assign([TopicPartition(txn_stack.txn_topic, where.partition, where.offset)])
    committing = threading.Thread(target=commit, daemon=True)

    def decided() -> bool:
        m = watch.poll(0.005)
        return m is not None and m.error() is None and b'"kind":"commit"' in (m.value() or b"")

    try:
        committing.start()
        until(decided, timeout_s=30, what="the commit decision logged", interval_s=0)
        g1.kill()
    finally:
        watch.close()
    written_at_kill = len(read(kafka_bootstrap, topic_name))
    committing.join(30)
    print(f"\ntxn: gateway killed after its commit decision, {written_at_kill:,} of {n:,} records written")
    with client(g2) as c:
        r = c.post(f"/api/v1/transactions/{tid}/commit")
        assert (r.status_code, r.json()["state"]) == (200, "committed"), r.text
        assert c.get(f"/api/v1/transactions/{tid}").json()["state"] == "committed"
    seqs = Counter(int(dict(m.headers())["ferry-transaction-seq"]) for m in read(kafka_bootstrap, topic_name))
    assert set(seqs) == set(range(n)), "a committed record is missing"
    print(f"txn: after the second commit every record present; {sum(seqs.values()) - n:,} written twice")
