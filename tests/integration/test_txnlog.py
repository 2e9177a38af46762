"""The transaction log on the real broker: a prepare's id names where its entries start, later
entries land in the same partition, and a transaction folds from there without a scan from the
topic's start; the first decision in the log wins."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from ferry import txn_tail
from ferry.txnlog import TxnId, TxnLog, parse_id
from tests.support.wait import until

pytestmark = pytest.mark.integration


@pytest.fixture(params=[False, True], ids=["log", "live-view"])
def log(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_name: str):  # type: ignore[no-untyped-def]
    tl = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn", follow=request.param)
    tl.ensure()
    yield tl
    tl.close()


def test_prepare_then_decisions_fold_from_the_prepare(log: TxnLog) -> None:
    records = [{"topic": "orders", "key": "k", "value_b64": "aGk=", "headers": {}}]
    ids = [log.prepare({"records": records, "check_url": "http://x/check", "timeout_ms": 1000}) for _ in range(5)]
    assert len({str(i) for i in ids}) == 5
    first = ids[0]
    assert parse_id(str(first)) == first
    state, prepare = log.read(first)
    assert state is not None and state.state == "prepared" and state.records == 1
    assert prepare is not None and prepare["records"] == records and prepare["check_url"] == "http://x/check"

    commit_at = log.append(first, {"kind": "commit"})
    rollback_at = log.append(first, {"kind": "rollback", "reason": "producer"})
    assert rollback_at > commit_at > first.offset
    state, _ = log.read(first)
    assert state is not None and state.state == "committing"  # the first decision wins
    # Read up to an offset: what a replica that wrote the commit saw at that point.
    state, _ = log.read(first, up_to=commit_at)
    assert state is not None and state.state == "committing"
    log.append(first, {"kind": "committed", "results": [{"partition": 0, "offset": 7}]})
    state, _ = log.read(first)
    assert state is not None and state.state == "committed" and state.results == [{"partition": 0, "offset": 7}]
    # The other transactions are untouched.
    other, _ = log.read(ids[1])
    assert other is not None and other.state == "prepared"


def test_unknown_ids(log: TxnLog) -> None:
    known = log.prepare({"records": [], "check_url": "http://x/c"})
    assert parse_id("nope") is None and parse_id("1.2.xyz") is None
    wrong_nonce = parse_id(f"{known.partition}.{known.offset}.{'0' * 16}")
    assert wrong_nonce is not None
    assert log.read(wrong_nonce) == (None, None)
    # Ids naming a partition the log does not have are as unknown, at once: nothing to wait for.
    for partition in (9, 12, 100):
        started = time.monotonic()
        assert log.read(TxnId(partition, 0, "0123456789abcdef")) == (None, None)
        assert asyncio.run(log.read_async(TxnId(partition, 0, "0123456789abcdef"), recent=True)) == (None, None)
        assert time.monotonic() - started < 1.0


def test_a_replica_that_learnt_fewer_partitions_finds_a_transaction_in_a_newer_one(
    log: TxnLog, kafka_bootstrap: str
) -> None:
    """An operator added partitions to the log; a replica started since prepared in one of them.
    A replica that counted before the log grew (here: told it has 4 of 9) counts again on such an
    id, instead of answering 404 for a transaction that exists, and keeps preparing where its view
    follows."""
    writer = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=log.topic)
    writer.ensure()
    try:
        ids = [writer.prepare({"records": [], "check_url": "http://x/c", "timeout_ms": 1000}) for _ in range(60)]
        beyond = next(i for i in ids if i.partition >= 4)
        behind = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=log.topic)
        behind.ensure()
        behind._partitions = behind._readable = 4  # as counted before the log grew
        behind._counted_at = 0.0
        try:
            state, _ = behind.read(beyond)
            assert state is not None and state.state == "prepared"
            assert asyncio.run(behind.read_async(beyond)) == behind.read(beyond)
            # Prepares stay on the partitions it started with; a made-up partition stays unknown
            # (counted again at most every RECOUNT_S, so it is answered at once).
            assert all(behind.prepare({"records": [], "check_url": "http://x/c"}).partition < 4 for _ in range(20))
            started = time.monotonic()
            assert behind.read(TxnId(99, 0, "0123456789abcdef")) == (None, None)
            assert time.monotonic() - started < 1.0
        finally:
            behind.close()
    finally:
        writer.close()


def test_the_live_view_answers_for_what_it_saw_and_defers_the_rest(
    kafka_bootstrap: str, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = {"bootstrap.servers": kafka_bootstrap}
    topic = f"{topic_name}-txn"
    # Every prepare in one partition, so that the view reads them in the order they were made (it
    # evicts the one it read first; from several partitions it may read the first one last).
    plain = TxnLog(cfg, topic=topic, sticky_ms=600_000)
    plain.ensure()
    before = plain.prepare({"records": [], "check_url": "http://x/c", "timeout_ms": 1000})
    monkeypatch.setattr(txn_tail, "MAX_TRANSACTIONS", 3)
    viewer = TxnLog(cfg, topic=topic, follow=True)
    viewer.ensure()
    tail = viewer._tail
    assert tail is not None and tail.started(10)
    try:
        # Prepared before the view started: the view does not vouch for it; the log answers.
        assert tail.entries(before.partition, before.offset, str(before), None, wait_s=0.5) is None
        state, _ = viewer.read(before, recent=True)
        assert state is not None and state.state == "prepared"

        ids = [plain.prepare({"records": [], "check_url": "http://x/c", "timeout_ms": 1000}) for _ in range(6)]
        last = ids[-1]
        at = plain.append(last, {"kind": "rollback", "reason": "producer"})
        raw = tail.entries(last.partition, last.offset, str(last), at, wait_s=10)
        assert raw is not None and len(raw) == 2  # the prepare and the rollback, from the view
        state, _ = viewer.read(last, up_to=at)
        assert state is not None and state.state == "rolled_back"
        # Evicted (the view keeps 3 transactions here): deferred to the log, still right.
        first = ids[0]
        assert tail.entries(first.partition, first.offset, str(first), None, wait_s=10) is None
        state, _ = viewer.read(first, recent=True)
        assert state is not None and state.state == "prepared"
        # A later entry of an evicted transaction is kept without its prepare: still deferred.
        at = plain.append(first, {"kind": "rollback", "reason": "producer"})
        assert tail.entries(first.partition, first.offset, str(first), at, wait_s=10) is None
        state, _ = viewer.read(first, up_to=at)
        assert state is not None and state.state == "rolled_back"
    finally:
        viewer.close()
        plain.close()


def test_the_async_path_holds_no_thread_and_agrees_with_the_log(
    log: TxnLog, kafka_bootstrap: str, topic_name: str
) -> None:
    """prepare_async / append_async / read_async / write_records_async, as the gateway uses them:
    a commit's first look at a transaction prepared here answers at once (nothing else can be
    known of it yet), a decision read up to itself sees the first decision in the log, and the
    records reach their topic with the transaction's id and sequence."""
    import asyncio

    from ferry import kafka
    from ferry.txnlog import stored_record
    from tests.support.kafka import create_topic

    target = f"{topic_name}-target"
    create_topic(kafka_bootstrap, target, 1)

    async def main() -> tuple[object, object, object, list[dict[str, object]]]:
        entry = {"records": [stored_record(target, b"k", b"v%d" % i, [("h", b"x")]) for i in range(3)]}
        tid = await log.prepare_async({**entry, "check_url": "http://x/c", "timeout_ms": 60_000})
        first, _ = await log.read_async(tid, recent=True)
        commit_at = await log.append_async(tid, {"kind": "commit", "by": "producer"})
        await log.append_async(tid, {"kind": "rollback", "reason": "producer"})  # too late: commit is first
        decided, prepare = await log.read_async(tid, commit_at)
        assert prepare is not None
        results = await log.write_records_async(str(tid), list(prepare["records"]))
        await log.append_async(tid, {"kind": "committed", "results": results})
        final, _ = await asyncio.to_thread(log.read, tid)
        return first, decided, final, results

    first, decided, final, results = asyncio.run(main())
    assert getattr(first, "state", None) == "prepared"
    assert getattr(decided, "state", None) == "committing"
    assert getattr(final, "state", None) == "committed"
    assert [r["offset"] for r in results] == [0, 1, 2]
    seen: list[tuple[bytes, dict[str, bytes]]] = []
    kafka.read_to_end(
        {"bootstrap.servers": kafka_bootstrap}, target, lambda m: seen.append((m.value(), dict(m.headers() or [])))
    )
    assert [v for v, _ in seen] == [b"v0", b"v1", b"v2"]
    assert [h["ferry-transaction-seq"] for _, h in seen] == [b"0", b"1", b"2"]
    assert {h["h"] for _, h in seen} == {b"x"}


def test_a_decision_folds_what_came_before_it_and_itself(log: TxnLog, kafka_bootstrap: str) -> None:
    """decide_async: the first decision in the log stands, whether this writer's is first (folded
    as written, without reading it back) or another writer's came before it."""
    import asyncio

    from ferry.txnlog import TxnLog as Log

    other = Log({"bootstrap.servers": kafka_bootstrap}, topic=log.topic)  # another replica, no view

    async def main() -> tuple[object, object, object]:
        a = await log.prepare_async({"records": [], "check_url": "http://x/c", "timeout_ms": 60_000})
        mine, _ = await log.decide_async(a, {"kind": "commit", "by": "producer", "eid": "mine"})
        b = await log.prepare_async({"records": [], "check_url": "http://x/c", "timeout_ms": 60_000})
        await asyncio.to_thread(other.append, b, {"kind": "rollback", "reason": "producer"})
        lost, _ = await log.decide_async(b, {"kind": "commit", "by": "producer", "eid": "late"})
        after, _ = await asyncio.to_thread(log.read, a)
        return mine, lost, after

    try:
        mine, lost, after = asyncio.run(main())
    finally:
        other.close()
    assert (getattr(mine, "state", None), getattr(mine, "decided_by", None)) == ("committing", "mine")
    assert getattr(lost, "state", None) == "rolled_back"
    assert (getattr(after, "state", None), getattr(after, "decided_by", None)) == ("committing", "mine")


def test_a_decision_right_after_its_own_prepare_reads_nothing(kafka_bootstrap: str, topic_name: str) -> None:
    """A decision stored right after the prepare this process wrote folds from those two entries
    (nothing else can lie before it); one with another entry in between still reads the view, so
    that the earlier decision stands."""
    import asyncio

    tl = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn", follow=True)
    tl.ensure()
    tail = tl._tail
    assert tail is not None
    viewed: list[str] = []
    view = tail.entries_async

    async def counted(partition: int, offset: int, txn_id: str, up_to: int | None, wait_s: float):  # type: ignore[no-untyped-def]
        viewed.append(txn_id)
        return await view(partition, offset, txn_id, up_to, wait_s)

    tail.entries_async = counted  # type: ignore[method-assign,assignment]

    async def main() -> tuple[object, object, str, str]:
        a = await tl.prepare_async({"records": [], "check_url": "http://x/c", "timeout_ms": 60_000})
        mine, _ = await tl.decide_async(a, {"kind": "commit", "by": "producer", "eid": "mine"})
        b = await tl.prepare_async({"records": [], "check_url": "http://x/c", "timeout_ms": 60_000})
        await tl.append_async(b, {"kind": "rollback", "reason": "producer"})  # as another replica would
        lost, _ = await tl.decide_async(b, {"kind": "commit", "by": "producer", "eid": "late"})
        return mine, lost, str(a), str(b)

    try:
        mine, lost, a, b = asyncio.run(main())
    finally:
        tl.close()
    assert (getattr(mine, "state", None), getattr(mine, "decided_by", None)) == ("committing", "mine")
    assert getattr(lost, "state", None) == "rolled_back"
    assert a not in viewed
    assert viewed.count(b) == 1


def test_own_prepares_are_kept_within_their_bytes(
    kafka_bootstrap: str, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepares a gateway wrote are kept for their commits only up to ``OWN_BYTES`` (oldest out):
    a gateway whose commits go to other replicas does not grow. An evicted one still commits."""
    import asyncio

    from ferry import txnlog
    from ferry.txnlog import stored_record

    monkeypatch.setattr(txnlog, "OWN_BYTES", 10_000)
    tl = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn", follow=True)
    tl.ensure()
    entry = {"records": [stored_record("t", b"k", b"x" * 3_000)], "check_url": "http://x/c", "timeout_ms": 60_000}

    async def main() -> tuple[list[str], list[object]]:
        ids = [await tl.prepare_async(entry) for _ in range(6)]
        kept = list(tl._own)
        decided = [(await tl.decide_async(i, {"kind": "commit", "by": "producer", "eid": str(i)}))[0] for i in ids]
        return kept, decided

    try:
        kept, decided = asyncio.run(main())
        assert tl._own_bytes == 0
    finally:
        tl.close()
    assert len(kept) == 2  # each prepare takes ~4 KB in the log
    assert [getattr(d, "state", None) for d in decided] == ["committing"] * 6


@pytest.mark.parametrize(("wait_ms", "at_least", "at_most"), [(10, 60, 400), (500, 1, 12)])
def test_an_idle_live_view_fetches_as_often_as_its_wait_allows(
    kafka_bootstrap: str, topic_name: str, wait_ms: int, at_least: int, at_most: int
) -> None:
    """``FERRY_FETCH_WAIT_MAX_MS`` reaches the gateway's live view: with nothing written, each
    fetch is held for the wait, so an operator on Apache Kafka can trade idle fetches for nothing
    (Kafka answers a held fetch as soon as an entry arrives). Counted by librdkafka's statistics."""
    fetches: list[int] = []

    def stats(doc: str) -> None:
        fetches.append(sum(b.get("req", {}).get("Fetch", 0) for b in json.loads(doc)["brokers"].values()))

    config = {"bootstrap.servers": kafka_bootstrap, "statistics.interval.ms": 1000, "stats_cb": stats}
    tl = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn")
    tl.ensure()
    tail = txn_tail.TxnTail(config, f"{topic_name}-txn", 9, fetch_wait_ms=wait_ms)
    try:
        until(lambda: len(fetches) >= 2, timeout_s=20, what="two statistics reports")
        first = len(fetches)
        until(lambda: len(fetches) >= first + 2, timeout_s=20, what="two seconds of fetches")
        per_s = (fetches[-1] - fetches[first - 1]) / (len(fetches) - first)
        assert at_least <= per_s <= at_most, f"{per_s:.0f} fetches/s with a {wait_ms} ms wait"
    finally:
        tail.close()
        tl.close()


def test_an_id_past_the_end_is_read_from_the_end_the_view_saw(
    kafka_bootstrap: str, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A made-up id naming an offset the log never reached: unknown, and the log is read from the
    partition's end as the live view last fetched it (nothing to read), not from the start of the
    partition after a second without an end, nor after the view's whole wait."""
    from ferry import kafka

    viewer = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn", follow=True)
    viewer.ensure()
    try:
        real = viewer.prepare({"records": [], "check_url": "http://x/c", "timeout_ms": 1000})
        tail = viewer._tail
        assert tail is not None and tail.started(10)
        until(lambda: (tail.end_of(real.partition) or 0) > real.offset, timeout_s=10, what="the view's end")
        end = tail.end_of(real.partition)
        starts: list[dict[tuple[str, int], int]] = []
        read = kafka.read_partitions_to_end

        def spy(consumer, starts_, *args, **kwargs):  # type: ignore[no-untyped-def]
            starts.append(dict(starts_))
            return read(consumer, starts_, *args, **kwargs)

        monkeypatch.setattr(kafka, "read_partitions_to_end", spy)
        made_up = TxnId(real.partition, 10_000_000, real.nonce)
        # The view waits its whole wait only for an offset below the end it last fetched.
        with tail._cond:
            assert tail._wait_for(real.partition, made_up.offset + 1, 5.0) == txn_tail.PAST_END_WAIT_S
            assert tail._wait_for(real.partition, real.offset + 1, 5.0) == 5.0
        assert asyncio.run(viewer.read_async(made_up, recent=True)) == (None, None)
        assert viewer.read(made_up) == (None, None)
        assert starts == [{(viewer.topic, real.partition): end}] * 2, starts
        # A real id is still read from its prepare.
        state, _ = viewer.read(real)
        assert state is not None and state.state == "prepared"
        assert starts[-1] == {(viewer.topic, real.partition): real.offset}, starts
        assert viewer.log_reads == 1  # the async read the view could not answer
    finally:
        viewer.close()
