"""Transactions through the gateway's operations on the real broker: a prepared transaction writes
nothing; commit writes every record once with ferry-transaction-id/-seq; verbs are idempotent and
the first decision in the log stands, whichever replica (here: two Transactions over two logs)
receives it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter

import orjson
import pytest

from ferry import kafka, txn
from ferry.gateway.records import Outgoing
from ferry.gateway.transactions import Transactions
from ferry.netguard import EndpointPolicy
from ferry.txnlog import TxnLog, parse_id, write_records
from tests.support.kafka import create_topic
from tests.support.wait import until_async

pytestmark = pytest.mark.integration


def any_topic(_topic: str) -> bool:
    """A token's right to write anywhere (an admin token's)."""
    return True


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    out = []

    def take(msg) -> None:  # type: ignore[no-untyped-def]
        out.append((msg.key(), msg.value(), dict(msg.headers() or [])))

    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, take)
    return out


@pytest.fixture(params=[False, True], ids=["log", "live-view"])
def replicas(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_name: str):  # type: ignore[no-untyped-def]
    """Two gateway replicas' transaction operations over the same log (reading it, or following
    it as gateways do)."""
    cfg = {"bootstrap.servers": kafka_bootstrap}
    logs = [TxnLog(cfg, topic=f"{topic_name}-txn", follow=request.param) for _ in range(2)]
    logs[0].ensure()
    producer = kafka.producer({**cfg, "enable.idempotence": True, "acks": "all"}, "test-writer")

    async def write(txn_id: str, records: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        return await asyncio.to_thread(write_records, producer, txn_id, records)

    policy = EndpointPolicy()
    yield [Transactions(log, write, policy) for log in logs]
    for log in logs:
        with contextlib.suppress(Exception):
            log.close()


def records_for(topic: str, n: int) -> list[Outgoing]:
    return [Outgoing(topic, f"k{i % 3}".encode(), f"v{i}".encode(), [("app", b"x")]) for i in range(n)]


async def test_prepare_commit_and_repeat(replicas, kafka_bootstrap: str, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    a, b = replicas
    create_topic(kafka_bootstrap, topic_name, 2)
    prepared = await a.prepare(records_for(topic_name, 5), "http://127.0.0.1:1/check", 60_000)
    assert prepared["state"] == "prepared"
    assert read_all(kafka_bootstrap, topic_name, 2) == []  # invisible until commit
    assert await b.get(prepared["id"], any_topic) == {"id": prepared["id"], "state": "prepared", "checks": 0}

    first = await b.commit(prepared["id"], any_topic)
    assert first["state"] == "committed" and len(first["results"]) == 5
    assert all("offset" in r for r in first["results"])
    again = await a.commit(prepared["id"], any_topic)  # another replica, the same answer, nothing written again
    assert again == first
    written = read_all(kafka_bootstrap, topic_name, 2)
    assert sorted(h["ferry-transaction-seq"] for _, _, h in written) == [str(i).encode() for i in range(5)]
    assert {h["ferry-transaction-id"] for _, _, h in written} == {prepared["id"].encode()}
    assert {h["app"] for _, _, h in written} == {b"x"}
    with pytest.raises(txn.Conflict):
        await a.rollback(prepared["id"], any_topic)
    assert (await a.get(prepared["id"], any_topic))["state"] == "committed"


async def test_rollback_is_final_and_writes_nothing(replicas, kafka_bootstrap: str, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    a, b = replicas
    create_topic(kafka_bootstrap, topic_name, 1)
    prepared = await a.prepare(records_for(topic_name, 2), "http://127.0.0.1:1/check", None)
    assert await b.rollback(prepared["id"], any_topic) == {"id": prepared["id"], "state": "rolled_back"}
    assert await a.rollback(prepared["id"], any_topic) == {"id": prepared["id"], "state": "rolled_back"}
    with pytest.raises(txn.Conflict):
        await a.commit(prepared["id"], any_topic)
    assert read_all(kafka_bootstrap, topic_name, 1) == []


async def test_contrary_verbs_at_once_one_decision_stands(replicas, kafka_bootstrap: str, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    a, b = replicas
    create_topic(kafka_bootstrap, topic_name, 1)
    for _ in range(3):
        prepared = await a.prepare(records_for(topic_name, 1), "http://127.0.0.1:1/check", None)
        outcomes = await asyncio.gather(
            a.commit(prepared["id"], any_topic), b.rollback(prepared["id"], any_topic), return_exceptions=True
        )
        final = (await a.get(prepared["id"], any_topic))["state"]
        if final == "committed":
            assert isinstance(outcomes[1], txn.Conflict) and outcomes[0]["state"] == "committed"
        else:
            assert final == "rolled_back" and isinstance(outcomes[0], txn.Conflict)
    ids_written = [h["ferry-transaction-id"] for _, _, h in read_all(kafka_bootstrap, topic_name, 1)]
    assert len(ids_written) == len(set(ids_written))  # each committed one written once


async def test_bad_input_and_unknown_ids(replicas, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    a, _ = replicas
    from ferry.errors import ValidationError

    with pytest.raises(ValidationError) as bad_url:
        await a.prepare([], "ftp://x/y", None)
    assert bad_url.value.field == "check_url"
    with pytest.raises(ValidationError) as metadata:
        await a.prepare([], "http://169.254.169.254/latest", None)
    assert metadata.value.field == "check_url"
    with pytest.raises(ValidationError) as bad_timeout:
        await a.prepare([], "http://127.0.0.1:1/c", 0)
    assert bad_timeout.value.field == "timeout_ms"
    for unknown in ("nope", "0.0.0000000000000000", "9.0.0123456789abcdef", "100.0.0123456789abcdef"):
        with pytest.raises(txn.UnknownTransaction):
            await a.get(unknown, any_topic)
        with pytest.raises(txn.UnknownTransaction):
            await a.commit(unknown, any_topic)


async def test_a_commit_decided_by_someone_else_is_left_to_them(
    replicas, kafka_bootstrap: str, topic_name: str
) -> None:  # type: ignore[no-untyped-def]
    """The back-check (or another replica) logged the commit and is writing the records: the
    producer's own commit request waits for that writer's ``committed`` and answers its results,
    writing nothing itself; only a decision whose writer never finishes is finished here."""
    a, _ = replicas
    create_topic(kafka_bootstrap, topic_name, 1)
    prepared = await a.prepare(records_for(topic_name, 2), "http://127.0.0.1:1/check", 60_000)
    tid = parse_id(prepared["id"])
    assert tid is not None
    writes: list[str] = []
    real_write = a._write

    async def counting(txn_id: str, records: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        writes.append(txn_id)
        return await real_write(txn_id, records)

    a._write = counting
    await a.log.append_async(tid, {"kind": "commit", "by": "check", "eid": "the-check"})
    results = [{"partition": 0, "offset": 0}, {"partition": 0, "offset": 1}]

    async def the_check_finishes() -> None:
        await asyncio.sleep(0.6)
        await a.log.append_async(tid, {"kind": "committed", "results": results})

    answer, _ = await asyncio.gather(a.commit(prepared["id"], any_topic), the_check_finishes())
    assert answer == {"id": prepared["id"], "state": "committed", "results": results}
    assert writes == []

    orphan = await a.prepare(records_for(topic_name, 1), "http://127.0.0.1:1/check", 60_000)
    otid = parse_id(orphan["id"])
    assert otid is not None
    old_ms = int(time.time() * 1000) - 60_000  # decided a minute ago by a writer that died
    await a.log.append_async(otid, {"kind": "commit", "by": "check", "eid": "dead", "ts": old_ms})
    finished = await a.commit(orphan["id"], any_topic)
    assert finished["state"] == "committed" and writes == [orphan["id"]]


async def test_a_verb_needs_the_right_to_every_topic_of_the_transaction(
    replicas, kafka_bootstrap: str, topic_name: str
) -> None:  # type: ignore[no-untyped-def]
    """Checked before the state is looked at: a token without the right learns nothing of it."""
    a, _ = replicas
    create_topic(kafka_bootstrap, topic_name, 1)
    prepared = await a.prepare(records_for(topic_name, 2), "http://127.0.0.1:1/check", 60_000)
    tid = prepared["id"]

    def elsewhere(topic: str) -> bool:
        return topic != topic_name

    for verb in (a.get, a.commit, a.rollback):
        with pytest.raises(txn.Forbidden) as err:
            await verb(tid, elsewhere)
        assert err.value.status == 403 and repr(topic_name) in str(err.value)
    assert (await a.rollback(tid, any_topic))["state"] == "rolled_back"
    with pytest.raises(txn.Forbidden):
        await a.commit(tid, elsewhere)  # not 409: the token may not know its state
    assert read_all(kafka_bootstrap, topic_name, 1) == []


async def test_a_committed_entry_of_the_old_shape_answers_written_records(
    replicas, kafka_bootstrap: str, topic_name: str
) -> None:  # type: ignore[no-untyped-def]
    """Logs written before the back-check kept where records went hold ``{"written": true}`` per
    record: a commit answers them in the shape of §9, written at an unknown position."""
    a, b = replicas
    create_topic(kafka_bootstrap, topic_name, 1)
    prepared = await a.prepare(records_for(topic_name, 2), "http://127.0.0.1:1/check", 60_000)
    tid = parse_id(prepared["id"])
    assert tid is not None
    await a.log.append_async(tid, {"kind": "commit", "by": "check", "eid": "old-check"})
    await a.log.append_async(tid, {"kind": "committed", "results": [{"written": True}] * 2})
    unknown = {"partition": None, "offset": None}
    for replica in (a, b):
        answer = await replica.commit(prepared["id"], any_topic)
        assert answer == {"id": prepared["id"], "state": "committed", "results": [unknown, unknown]}
    assert read_all(kafka_bootstrap, topic_name, 1) == []  # answered from the log: nothing written again


async def test_a_log_switching_producers_under_load_loses_no_transaction(kafka_bootstrap: str, topic_name: str) -> None:
    """Concurrent transactions through a gateway's log whose entries switch between its quick and
    its lingering producer again and again: every commit finds its prepare, and every record is
    written once. (That only one producer has writes in flight at a time is checked in
    tests/unit/test_switched_producer.py; the embedded broker's reordering when both do is too rare
    to show in a test this short.)"""
    cfg = {"bootstrap.servers": kafka_bootstrap}
    create_topic(kafka_bootstrap, topic_name, 2)
    log = TxnLog(cfg, topic=f"{topic_name}-txn", follow=True, busy_linger_ms=2, busy_at=4, busy_dwell_s=0.0)
    log.ensure()
    try:

        async def write(txn_id: str, records: list[dict]) -> list[dict]:  # type: ignore[type-arg]
            return await log.write_records_async(txn_id, records)

        ops = Transactions(log, write, EndpointPolicy())

        async def one(i: int) -> str:
            prepared = await ops.prepare(
                [Outgoing(topic_name, f"k{i}".encode(), f"v{i}".encode(), [])], "http://127.0.0.1:1/c", None
            )
            committed = await ops.commit(prepared["id"], any_topic)
            assert committed["state"] == "committed", committed
            return str(prepared["id"])

        # Waves of 40 at once, each after the last one's writes are all reported: each wave starts
        # on the quick producer (nothing outstanding) and moves to the lingering one (40 at once).
        ids: list[str] = []
        waves = 6
        for w in range(waves):
            ids += await asyncio.gather(*(one(w * 40 + i) for i in range(40)))
            await until_async(lambda: log.writes_outstanding == 0, 30, "the wave's writes to be reported")
        assert log.producer_switches >= 2 * waves - 1, log.producer_switches
    finally:
        log.close()
    written = read_all(kafka_bootstrap, topic_name, 2)
    assert sorted(h["ferry-transaction-id"].decode() for _, _, h in written) == sorted(ids)


async def test_commits_at_once_share_committed_entries_every_replica_reads(
    replicas, kafka_bootstrap: str, topic_name: str
) -> None:  # type: ignore[no-untyped-def]
    """Commits that finish while their partition's ``committed`` entry is in flight share the next
    one, and each transaction reads back committed with its own results from the other replica
    (its live view, or the log itself), nothing written twice. The commits are done step by step as
    ``Transactions.commit`` does them, their ``committed`` logged in one go: the first entry goes
    alone, the others wait for it and share the next."""
    a, b = replicas
    create_topic(kafka_bootstrap, topic_name, 2)
    for replica in replicas:  # as a gateway does before it listens: its view reads all that follows
        replica.log.ensure()
        assert replica.log.view_started(10)
    ids, answers = [], []
    for i in range(40):
        prepared = await a.prepare(records_for(topic_name, 1 + i % 3), "http://127.0.0.1:1/c", 60_000)
        tid = parse_id(prepared["id"])
        assert tid is not None
        state, prepare = await a.log.decide_async(tid, {"kind": "commit", "by": "producer", "eid": f"e{i}"})
        assert state is not None and state.state == "committing" and prepare is not None
        ids.append(tid)
        answers.append(await a.log.write_records_async(str(tid), list(prepare["records"])))
    offsets = await asyncio.gather(*(a.log.committed_soon(t, r) for t, r in zip(ids, answers, strict=True)))
    per_partition = Counter(tid.partition for tid in ids)  # each: its first alone, then the rest in one
    assert a.log.committed_transactions == 40
    assert a.log.committed_entries == sum(min(n, 2) for n in per_partition.values()) < 40
    assert len({(tid.partition, at) for tid, at in zip(ids, offsets, strict=True)}) == a.log.committed_entries
    for tid, results in zip(ids, answers, strict=True):
        expected = {"id": str(tid), "state": "committed", "results": results}
        seen, _ = await b.log.read_async(tid, recent=True)  # what the live view holds, when there is one
        assert seen is not None and (seen.state, seen.results) == ("committed", results)
        assert await b.commit(str(tid), any_topic) == expected  # answered from the shared entry
        assert b.log.log_reads == 0  # the view could answer for every one
        assert (await b.get(str(tid), any_topic))["state"] == "committed"
    written = read_all(kafka_bootstrap, topic_name, 2)
    assert len(written) == sum(1 + i % 3 for i in range(40))  # none written again by the repeats
    view = a.log._tail
    if view is not None:  # it counts a shared entry's bytes once against its bound, not once per id
        logged = sum(len(value or b"") for _, value, _ in read_all(kafka_bootstrap, f"{topic_name}-txn", 9))
        assert 0 < view._bytes <= logged + 40, (view._bytes, logged)


async def test_a_graceful_stop_writes_the_committed_entries_still_waiting(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """As the gateway stops: ``flush_committed``, then ``close``. The entries waiting behind the one
    in flight are written too. (``close`` runs on the loop here, blocking it, so that no
    acknowledgement can send them in between: the gateway closes in a thread.)"""
    cfg = {"bootstrap.servers": kafka_bootstrap}
    log = TxnLog(cfg, topic=f"{topic_name}-txn", sticky_ms=600_000)
    log.ensure()
    tids = [await log.prepare_async({"records": [], "check_url": "http://x/c", "timeout_ms": 60_000}) for _ in range(5)]
    for tid in tids:
        log.committed_soon(tid, [])
    assert log._committed.waiting == 4  # behind the first
    log.flush_committed()
    log.close()
    logged = [orjson.loads(v) for _, v, _ in read_all(kafka_bootstrap, f"{topic_name}-txn", 9) if v]
    committed = [e for entry in logged if entry["kind"] == "committed" for e in txn.expand(entry)]
    assert sorted(e["id"] for e in committed) == sorted(map(str, tids))
