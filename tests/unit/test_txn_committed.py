"""One ``committed`` entry for the transactions of a partition committed while the previous one was
in flight (ferry.txn_committed), driven with a send port whose acknowledgements the test gives."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferry import txn, txnlog
from ferry.txn_committed import CommittedWriter


class Log:
    """The send port: every entry queued, and the future of its offset for the test to settle."""

    def __init__(self, refuse: BaseException | None = None) -> None:
        self.sent: list[tuple[int, bytes, dict[str, Any], asyncio.Future[int]]] = []
        self.refuse = refuse

    def send(self, partition: int, key: bytes, entry: dict[str, Any]) -> asyncio.Future[int]:
        if self.refuse is not None:
            raise self.refuse
        acked: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.sent.append((partition, key, entry, acked))
        return acked

    def ids(self) -> list[list[str]]:
        """The transactions each entry holds, as its readers find them."""
        return [[e["id"] for e in txn.expand(entry)] for _, _, entry, _ in self.sent]


def results(n: int, base: int = 0) -> list[dict[str, Any]]:
    return [{"partition": 0, "offset": base + i} for i in range(n)]


async def settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_an_idle_partition_writes_at_once_and_alone() -> None:
    log = Log()
    writer = CommittedWriter(log.send)
    logged = writer.add(3, "3.10.aa", results(2))
    assert log.sent == [(3, b"3.10.aa", {"kind": "committed", "id": "3.10.aa", "results": results(2)}, log.sent[0][3])]
    log.sent[0][3].set_result(41)
    assert await logged == 41
    assert (writer.entries, writer.transactions, writer.waiting) == (1, 1, 0)


async def test_commits_behind_one_in_flight_share_the_next_entry() -> None:
    log = Log()
    writer = CommittedWriter(log.send)
    first = writer.add(0, "0.1.a", results(1))
    behind = [writer.add(0, f"0.{i}.b", results(1, i)) for i in range(2, 5)]
    elsewhere = writer.add(1, "1.1.c", results(1))  # another partition does not wait
    assert log.ids() == [["0.1.a"], ["1.1.c"]] and writer.waiting == 3
    log.sent[0][3].set_result(7)
    await settled()
    assert log.ids()[2] == ["0.2.b", "0.3.b", "0.4.b"]
    partition, key, entry, acked = log.sent[2]
    assert (partition, key) == (0, b"0.2.b 0.3.b 0.4.b")  # every id it holds, the entry's own first
    assert entry["more"] == {"0.3.b": results(1, 3), "0.4.b": results(1, 4)}
    acked.set_result(9)
    log.sent[1][3].set_result(2)
    assert await first == 7 and await asyncio.gather(*behind) == [9, 9, 9] and await elsewhere == 2
    assert (writer.entries, writer.transactions, writer.waiting) == (3, 5, 0)


@pytest.mark.parametrize(
    ("most_transactions", "most_results", "sizes", "entries"),
    [
        (2, 100, [1, 1, 1, 1, 1], [[1, 2], [3, 4], [5]]),  # at most two transactions an entry
        (10, 5, [3, 2, 1, 4, 6], [[1, 2], [3, 4], [5]]),  # at most five results (one alone may pass)
    ],
    ids=["transactions", "results"],
)
async def test_a_long_wait_is_split_into_bounded_entries(
    most_transactions: int, most_results: int, sizes: list[int], entries: list[list[int]]
) -> None:
    log = Log()
    writer = CommittedWriter(log.send, most_transactions, most_results)
    writer.add(0, "t0", results(1))
    for i, n in enumerate(sizes, 1):
        writer.add(0, f"t{i}", results(n))
    log.sent[0][3].set_result(0)
    await settled()
    assert log.ids() == [["t0"], *([f"t{i}" for i in chunk] for chunk in entries)]


async def test_a_failed_entry_fails_every_transaction_it_holds_and_the_next_ones_still_go() -> None:
    log = Log()
    writer = CommittedWriter(log.send)
    writer.add(0, "t1", results(1))
    two = [writer.add(0, "t2", results(1)), writer.add(0, "t3", results(1))]
    log.sent[0][3].set_result(0)
    await settled()
    later = writer.add(0, "t4", results(1))
    log.sent[1][3].set_exception(RuntimeError("log down"))
    await settled()
    for logged in two:
        with pytest.raises(RuntimeError, match="log down"):
            await logged
    assert log.ids()[2] == ["t4"]
    log.sent[2][3].set_result(5)
    assert await later == 5


async def test_a_refused_send_is_each_transactions_error_not_the_callers() -> None:
    writer = CommittedWriter(Log(refuse=ValueError("too large")).send)
    logged = writer.add(0, "t1", results(1))
    with pytest.raises(ValueError, match="too large"):
        await logged
    again = writer.add(0, "t2", results(1))  # nothing was left in flight: it is sent (and refused) at once
    assert writer.waiting == 0 and again.done() and isinstance(again.exception(), ValueError)


async def test_flush_sends_what_waits_without_waiting_for_the_entry_in_flight() -> None:
    log = Log()
    writer = CommittedWriter(log.send)
    writer.add(0, "t1", results(1))
    writer.add(0, "t2", results(1))
    writer.add(2, "u1", results(1))
    writer.add(2, "u2", results(1))
    writer.flush()
    assert log.ids() == [["t1"], ["u1"], ["t2"], ["u2"]] and writer.waiting == 0
    for *_, acked in log.sent:
        acked.set_result(1)
    await settled()
    assert len(log.sent) == 4  # nothing was left to send after the acknowledgements


async def test_a_cancelled_entry_cancels_its_transactions() -> None:
    log = Log()
    writer = CommittedWriter(log.send)
    logged = writer.add(0, "t1", results(1))
    log.sent[0][3].cancel()
    await settled()
    assert logged.cancelled()


@pytest.mark.parametrize(
    ("key", "shared"),
    [
        (b"1.5.aa 1.6.bb 1.7.cc", True),
        (b"1.6.bb", True),  # its own key names it too (the read takes it as its own first)
        (b"11.6.bb 1.7.cc", False),  # the id only as a part of another
        (b"1.6.bbb 1.7.cc", False),
        (None, False),
        (b"", False),
    ],
)
def test_a_log_read_finds_a_transaction_in_a_shared_key_by_whole_ids(key: bytes | None, shared: bool) -> None:
    assert txnlog._shared_by(key, b"1.6.bb") is shared
