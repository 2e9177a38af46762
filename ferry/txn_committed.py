"""One ``committed`` entry for the transactions a process commits in one log partition at a time.

Use case: a gateway under load commits hundreds of transactions a second in each partition of the
transaction log (its prepares stay in one partition for ``FERRY_TXN_STICKY_MS``). A ``committed``
entry of its own per transaction is a write, a message for every reader of the log and work for the
brokers. Here a partition has at most one ``committed`` write in flight; the transactions committed
meanwhile wait for its acknowledgement and then go together as the next entry, whose ``more`` holds
the results of every transaction but the first (:func:`ferry.txn.expand` reads it). A partition with
nothing in flight writes at once, so a transaction's entry waits only behind another one.

States of one partition::

    idle ──add──▶ writing ──acknowledged, nothing waiting──▶ idle
                   │   ▲
              add  │   │ acknowledged: what waits goes as the next entry
                   ▼   │
              writing, some waiting

The entry's key is every transaction id it holds, space-separated, the first one first: the log's
readers keep an entry under each of them (:mod:`ferry.txn_tail`, :meth:`ferry.txnlog.TxnLog.read`).
A commit's answer does not wait for its entry (its records are acknowledged before); the future of
:meth:`CommittedWriter.add` says whether the entry got into the log. :meth:`CommittedWriter.flush`
sends whatever waits at once (a graceful stop, before the producer is flushed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

Send = Callable[[int, bytes, dict[str, Any]], "asyncio.Future[int]"]
"""Queue one entry in a partition of the log with a key → the future of its offset."""

MOST_TRANSACTIONS = 256
"""Transactions one shared entry holds at most (its key is all their ids)."""
MOST_RESULTS = 4096
"""Records' results one shared entry holds at most (about 40 bytes each as JSON): the entry stays
far below the brokers' 1 MB for a record."""

_Waiting = tuple[str, list[dict[str, Any]], "asyncio.Future[int]"]


class CommittedWriter:
    """Logs ``committed`` for transactions, sharing one entry among those that wait together."""

    def __init__(self, send: Send, most_transactions: int = MOST_TRANSACTIONS, most_results: int = MOST_RESULTS):
        self._send = send
        self._most_transactions = most_transactions
        self._most_results = most_results
        self._waiting: dict[int, list[_Waiting]] = {}
        self._writing: dict[int, int] = {}  # partition → shared entries in flight
        self.entries = 0
        """``committed`` entries written so far (each for one or more transactions)."""
        self.transactions = 0
        """Transactions whose ``committed`` those entries hold."""

    def add(self, partition: int, txn_id: str, results: list[dict[str, Any]]) -> asyncio.Future[int]:
        """Log that ``txn_id`` (of log ``partition``) is committed with ``results``; the future of
        the offset of the entry that holds it (or of the error that kept it out of the log)."""
        logged: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(partition, []).append((txn_id, results, logged))
        if not self._writing.get(partition):
            self._write(partition)
        return logged

    @property
    def waiting(self) -> int:
        """Transactions waiting for an entry in flight before theirs can go."""
        return sum(len(w) for w in self._waiting.values())

    def flush(self) -> None:
        """Send every waiting transaction's entry now, without waiting for those in flight."""
        for partition in list(self._waiting):
            self._write(partition)

    def _write(self, partition: int) -> None:
        for chunk in self._chunks(self._waiting.pop(partition, [])):
            ids = [txn_id for txn_id, _, _ in chunk]
            entry: dict[str, Any] = {"kind": "committed", "id": ids[0], "results": chunk[0][1]}
            if len(chunk) > 1:
                entry["more"] = {txn_id: results for txn_id, results, _ in chunk[1:]}
            futures = [logged for _, _, logged in chunk]
            try:
                sent = self._send(partition, " ".join(ids).encode("ascii"), entry)
            except Exception as exc:  # each transaction's future carries it
                _settle(futures, exc)
                continue
            self.entries += 1
            self.transactions += len(chunk)
            self._writing[partition] = self._writing.get(partition, 0) + 1
            sent.add_done_callback(partial(self._written, partition, futures))

    def _chunks(self, waiting: list[_Waiting]) -> list[list[_Waiting]]:
        chunks: list[list[_Waiting]] = []
        results = 0
        for item in waiting:
            if not chunks or len(chunks[-1]) >= self._most_transactions or results + len(item[1]) > self._most_results:
                chunks.append([])
                results = 0
            chunks[-1].append(item)
            results += len(item[1])
        return chunks

    def _written(self, partition: int, futures: list[asyncio.Future[int]], sent: asyncio.Future[int]) -> None:
        left = self._writing.get(partition, 1) - 1
        if left:
            self._writing[partition] = left
        else:
            self._writing.pop(partition, None)
        if sent.cancelled():
            _settle(futures, None)
        else:
            exc = sent.exception()
            _settle(futures, exc if exc is not None else sent.result())
        if not left and partition in self._waiting:
            self._write(partition)


def _settle(futures: list[asyncio.Future[int]], outcome: int | BaseException | None) -> None:
    """Give every future the offset (an int), the error, or (None) a cancellation."""
    for logged in futures:
        if logged.done():
            continue
        if outcome is None:
            logged.cancel()
        elif isinstance(outcome, BaseException):
            logged.set_exception(outcome)
        else:
            logged.set_result(outcome)
