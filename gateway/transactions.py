"""Transactional (half) messages through the gateway: prepare, commit, rollback, state.

Use case: a service writes its database and "sends" events in one local transaction. It prepares
the records (durable, invisible), then commits or rolls back after its local transaction; if it
does neither in time, the worker owning the transaction's log partition asks its ``check_url``
(docs/contract.md §11, docs/transactions.md).

Every operation reads and appends the transaction log (:mod:`ferry.txnlog`) and nothing else, so
any replica answers any request, and a restart forgets nothing. Two replicas receiving contrary
verbs at once both append their decision; each then reads the log up to its own entry, and the
first decision there stands (the other answers 409). A commit writes the records with
``ferry-transaction-id`` / ``ferry-transaction-seq`` after its decision is logged, and answers once
every record is acknowledged, with ``committed`` queued to the log (not awaited); if the replica
dies before that entry is in the log, whoever finishes the commit (a repeated commit request, or
the check runner after a grace period) writes the records again.

These are plain async functions over two ports (the log, and a writer of records to their topics),
so the HTTP handlers stay thin and tests can drive them directly.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from ferry import log, netguard, txn
from ferry.clock import now_ms
from ferry.errors import EndpointRefused, ValidationError
from ferry.gateway.records import Outgoing
from ferry.netguard import EndpointPolicy, literal_address
from ferry.txnlog import TxnId, TxnLog, new_nonce, parse_id, stored_record

_log = log.get_logger(__name__)

Write = Callable[[str, list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]
"""Write a committed transaction's stored records (id, records) → one result per record, as §9."""
MayWrite = Callable[[str], bool]
"""Whether the caller may write to a topic (its token's right): it may act on a transaction only
where it could have prepared it, that is write to every record's topic."""

MAX_TIMEOUT_MS = 24 * 3600 * 1000
FINISH_WAIT_S = 10.0
"""How long a commit waits for another writer's ``committed`` before it writes the records itself
(less than the back-check's grace, so a producer retrying a commit is answered first)."""
FINISH_POLL_S = 0.2
CHECKED_FOR_S = 60.0
"""How long a ``check_url`` that passed the check is taken again without checking (:class:`CheckedUrls`)."""
CHECKED_URLS = 4096


class Transactions:
    def __init__(self, log: TxnLog, write: Write, policy: EndpointPolicy) -> None:
        self.log = log
        self._write = write
        self._policy = policy
        self._logging: set[asyncio.Future[int]] = set()  # `committed` entries not yet acknowledged
        self._checked = CheckedUrls()

    async def prepare(self, records: list[Outgoing], check_url: Any, timeout_ms: Any) -> dict[str, Any]:
        """Store a prepared transaction of already validated ``records``."""
        if not self._checked.fresh(check_url):
            check_url = await self._check_url(check_url)
            self._checked.add(check_url)
        if timeout_ms is None:
            timeout_ms = txn.DEFAULT_TIMEOUT_MS
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise ValidationError("timeout_ms", f"must be an integer in 1..{MAX_TIMEOUT_MS}")
        entry = {
            "records": [stored_record(r.topic, r.key, r.value, r.headers, r.partition) for r in records],
            "check_url": check_url,
            "timeout_ms": timeout_ms,
            "ts": now_ms(),
        }
        txn_id = await self.log.prepare_async(entry)
        return {"id": str(txn_id), "state": "prepared"}

    async def _check_url(self, value: Any) -> str:
        """``check_url`` if it is a URL Ferry may send the back-check to (400 ``check_url`` if not):
        its form, then the SSRF policy on the addresses its host resolves to."""
        check_url = netguard.http_url(
            value,
            "check_url",
            "Ferry asks whether to commit a transaction left undecided",
            "the check is sent without them (put a secret the check endpoint needs in its path)",
        )
        try:
            if literal_address(urlsplit(check_url).hostname or "") is not None:
                self._policy.check_url(check_url)  # nothing to resolve: no thread
            else:
                await asyncio.to_thread(self._policy.check_url, check_url)
        except EndpointRefused as exc:  # the policy's refusal says which rule and what to change
            raise ValidationError("check_url", str(exc)) from None
        return check_url

    async def get(self, raw_id: str, may_write: MayWrite) -> dict[str, Any]:
        tid = _parse(raw_id)
        state, prepare = await self.log.read_async(tid)
        if state is None:
            raise txn.UnknownTransaction(_unknown(raw_id))
        _check_scope(raw_id, prepare, may_write)
        return state.public()

    async def commit(self, raw_id: str, may_write: MayWrite) -> dict[str, Any]:
        tid = _parse(raw_id)
        state, prepare = await self.log.read_async(tid, recent=True)
        _check_scope(raw_id, prepare, may_write)
        answer = txn.decide(state, "commit", raw_id)
        mine = False
        if answer == "append":
            eid = new_nonce()
            state, prepare = await self.log.decide_async(tid, {"kind": "commit", "by": "producer", "eid": eid})
            answer = txn.decide(state, "commit", raw_id)  # the first decision in the log stands
            mine = state is not None and state.decided_by == eid
        if answer == "finish" and not mine:
            # Decided to commit by someone else (another replica, the back-check) who may be
            # writing the records right now: wait for its `committed` rather than write them a
            # second time; finish the commit only if it does not come (its writer died).
            state, prepare = await self._committed_by_others(tid)
            answer = txn.decide(state, "commit", raw_id)
        assert state is not None and prepare is not None
        if answer == "same":
            return {"id": raw_id, "state": "committed", "results": state.results or []}
        results = await self._write(raw_id, list(prepare.get("records", ())))
        # Every record is acknowledged: the answer need not wait for `committed` to be. It is queued
        # now, or shares the next entry of its partition while one is in flight (a graceful stop
        # flushes both); if this gateway dies first, the back-check finishes the commit after its
        # grace by writing the records again: the one place duplicates come from.
        logged = self.log.committed_soon(tid, results)
        self._logging.add(logged)
        logged.add_done_callback(self._committed_logged)
        return {"id": raw_id, "state": "committed", "results": results}

    def _committed_logged(self, logged: asyncio.Future[int]) -> None:
        self._logging.discard(logged)
        if not logged.cancelled() and logged.exception() is not None:
            _log.warning("txn.committed_not_logged", error=str(logged.exception()))

    async def _committed_by_others(self, tid: TxnId) -> tuple[txn.Txn | None, dict[str, Any] | None]:
        """The transaction once its ``committed`` entry is in the log, or as it is once its
        decision is :data:`FINISH_WAIT_S` old (then the caller writes the records: their writer
        is gone). Measured from the decision, so retried requests do not each wait anew."""
        while True:
            state, prepare = await self.log.read_async(tid)  # the whole log: the view may lag
            if state is None or state.state != "committing":
                return state, prepare
            decided_s = (state.decided_ms or 0) / 1000
            if time.time() >= decided_s + FINISH_WAIT_S:
                return state, prepare
            await asyncio.sleep(min(FINISH_POLL_S, max(0.0, decided_s + FINISH_WAIT_S - time.time())))

    async def rollback(self, raw_id: str, may_write: MayWrite) -> dict[str, Any]:
        tid = _parse(raw_id)
        state, prepare = await self.log.read_async(tid, recent=True)
        _check_scope(raw_id, prepare, may_write)
        answer = txn.decide(state, "rollback", raw_id)
        if answer == "append":
            state, _ = await self.log.decide_async(tid, {"kind": "rollback", "reason": "producer"})
            txn.decide(state, "rollback", raw_id)  # raises Conflict when a commit was logged first
        return {"id": raw_id, "state": "rolled_back"}


class CheckedUrls:
    """The ``check_url`` values that passed the check lately: a producer sends the same one with
    every prepare, and checking it again would resolve its host (a thread and a DNS look-up) per
    transaction. Only passes are kept, for :data:`CHECKED_FOR_S` each, at most
    :data:`CHECKED_URLS` of them (oldest out). Whoever sends the back-check resolves the host and
    applies the SSRF policy again at that time, so a URL that became a refused target since its
    prepare is never asked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at: OrderedDict[str, float] = OrderedDict()

    def fresh(self, url: Any) -> bool:
        """Whether ``url`` passed the check less than :data:`CHECKED_FOR_S` ago."""
        if not isinstance(url, str):
            return False
        at = self._at.get(url)
        if at is None:
            return False
        if self._clock() - at >= CHECKED_FOR_S:
            del self._at[url]
            return False
        return True

    def add(self, url: str) -> None:
        self._at[url] = self._clock()
        self._at.move_to_end(url)
        while len(self._at) > CHECKED_URLS:
            self._at.popitem(last=False)


def _parse(raw_id: str) -> TxnId:
    tid = parse_id(raw_id)
    if tid is None:
        raise txn.UnknownTransaction(_unknown(raw_id))
    return tid


def _check_scope(raw_id: str, prepare: dict[str, Any] | None, may_write: MayWrite) -> None:
    """Raise :class:`ferry.txn.Forbidden` unless the caller may write every record's topic (checked
    before any answer that depends on the state, so a token without the right learns nothing of
    it). Nothing to check for an unknown transaction: the caller answers 404."""
    for rec in (prepare or {}).get("records", ()):
        if not may_write(rec["topic"]):
            raise txn.Forbidden(
                f"this token may not produce to topic {rec['topic']!r}, which transaction {raw_id!r} writes to;"
                " use a token whose topic patterns match every topic of the transaction"
            )


def _unknown(raw_id: str) -> str:
    return f"no transaction {raw_id!r} (unknown, or older than the transaction log keeps)"
