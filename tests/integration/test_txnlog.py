"""The transaction log on the real broker: a prepare's id names where its entries start, later
entries land in the same partition, and a transaction folds from there without a scan from the
topic's start; the first decision in the log wins."""

from __future__ import annotations

import pytest

from ferry.txnlog import TxnLog, parse_id

pytestmark = pytest.mark.integration


@pytest.fixture()
def log(kafka_bootstrap: str, topic_name: str):  # type: ignore[no-untyped-def]
    tl = TxnLog({"bootstrap.servers": kafka_bootstrap}, topic=f"{topic_name}-txn")
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
