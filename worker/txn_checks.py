"""Back-checks of transactional half messages, on the worker that owns a transaction-log partition.

Use case: a producer prepared records through the gateway and then neither committed nor rolled
back (it crashed, or lost the answer). The owner of the transaction's log partition asks the
producer's ``check_url`` once ``timeout_ms`` has passed, and logs what the answer decides
(docs/contract.md §11, docs/design/transactions.md).

How it runs: the partitions of the transaction log are work like a subscription's (assigned by the
coordinator, fenced, handed over, their progress merged into the offsets topic). The runner sees
each log entry of its partitions in log order through :meth:`CheckRunner.handle`, and the entry
counts as done (its offset may be committed) when ``handle`` returns:

- a ``prepare`` returns once its transaction is final — so the partition's committed offset never
  passes a transaction still in play, and whoever owns the partition next reads it again;
- every other entry returns at once, after updating the state and waking the prepare's waiter.

States of one transaction here (``ferry.txn``)::

    prepared ──(timeout_ms)──▶ check ──commit──▶ committing ──(records written)──▶ committed
       │                          │ unknown: again after 1, 2, 4 … 60 s, FERRY_TXN_MAX_CHECKS times
       │                          └─rollback / too many unknowns──▶ rolled_back
       └── the producer's commit or rollback through the gateway (a later log entry)

A check's decision is logged and then awaited in the log: this owner may be behind, and the
producer's own commit or rollback may already be there, unseen. Only when the decision it logged
is the first one does it stand here: then the records are written and ``committed`` logged;
otherwise whoever decided first finishes. A ``committing`` transaction whose ``committed`` entry
does not follow within ``grace_ms`` (the gateway that decided died while writing) is finished
here: its records are written again (at least once) and ``committed`` is logged.

I/O goes through three ports so the whole protocol runs in tests in milliseconds: :class:`Log`
(append an entry), ``ask`` (POST the check; SSRF policy, timeout and bounded answer are the
adapter's) and ``write`` (produce the records with ``ferry-transaction-id`` / ``-seq``).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ferry import clock, log, txn

_log = log.get_logger(__name__)

DEFAULT_GRACE_MS = 30_000
ECHO_WAIT_S = 30.0
"""How long a check's decision waits to see itself in the log before leaving it to be handled
like any other entry when it arrives."""


class Log(Protocol):
    async def append(self, txn_id: str, entry: dict[str, Any]) -> None: ...


Ask = Callable[[str, dict[str, Any]], Awaitable[txn.CheckAnswer]]
Write = Callable[[str, list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]


@dataclass
class _Open:
    """A transaction of an owned partition that is not final yet."""

    state: txn.Txn
    prepare: dict[str, Any]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    committing_since_ms: int | None = None


@dataclass
class Counters:
    """What this owner saw since it started: its checks, and the outcome of every transaction of
    its partitions that became final while it watched, whoever decided it (the producer through
    a gateway, or a check)."""

    checks: int = 0
    check_failures: int = 0  # answered unknown, or not at all
    committed: int = 0
    rolled_back: int = 0
    finished_after_crash: int = 0


class CheckRunner:
    def __init__(
        self,
        log_: Log,
        ask: Ask,
        write: Write,
        *,
        max_checks: int = txn.DEFAULT_MAX_CHECKS,
        grace_ms: int = DEFAULT_GRACE_MS,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> None:
        self._log = log_
        self._ask = ask
        self._write = write
        self.max_checks = max_checks
        self.grace_ms = grace_ms
        self._now_ms = now_ms
        self.open: dict[str, _Open] = {}
        self.counters = Counters()
        self._mine: set[str] = set()  # checks logged here: their echo from the log is not a second check
        self._echoes: dict[str, asyncio.Event] = {}  # decisions logged here, until their echo is seen

    # --- the entries of the log ---------------------------------------------------------------

    async def handle(self, entry: dict[str, Any]) -> None:
        """One log entry, in log order; returns when its offset may be committed."""
        for each in txn.expand(entry):  # a `committed` entry may stand for several transactions
            await self._handle(each)

    async def _handle(self, entry: dict[str, Any]) -> None:
        txn_id = entry.get("id")
        if not isinstance(txn_id, str):
            return
        if entry.get("kind") == "prepare":
            state = txn.apply(None, entry)
            if state is None:
                return
            opened = self.open.setdefault(txn_id, _Open(state, entry))
            try:
                await self._watch(txn_id, opened)
            finally:  # final, or this owner let the partition go: either way no longer ours to watch
                if self.open.get(txn_id) is opened:
                    del self.open[txn_id]
            return
        if entry.get("kind") == "check" and entry.get("eid") in self._mine:
            self._mine.discard(entry["eid"])
            return
        opened_or_none = self.open.get(txn_id)
        if opened_or_none is not None:
            self._apply(opened_or_none, entry)
        echoed = self._echoes.get(entry.get("eid", ""))
        if echoed is not None:
            echoed.set()

    def _apply(self, opened: _Open, entry: dict[str, Any]) -> None:
        after = txn.apply(opened.state, entry)
        if after is None or after == opened.state:
            return
        if after.state == "committing" and opened.committing_since_ms is None:
            opened.committing_since_ms = self._now_ms()
        if after.final and not opened.state.final:
            if after.state == "committed":
                self.counters.committed += 1
            else:
                self.counters.rolled_back += 1
        opened.state = after
        opened.changed.set()

    # --- one open transaction -----------------------------------------------------------------

    async def _watch(self, txn_id: str, opened: _Open) -> None:
        while not opened.state.final:
            due = self._due_ms(opened)
            opened.changed.clear()
            wait_s = max(0.0, (due - self._now_ms()) / 1000)
            try:
                await asyncio.wait_for(opened.changed.wait(), timeout=wait_s)
                continue  # a later entry changed it: look again
            except TimeoutError:
                pass
            if opened.state.state == "prepared":
                await self._check(txn_id, opened)
            elif opened.state.state == "committing":
                await self._finish(txn_id, opened, after_crash=True)

    def _due_ms(self, opened: _Open) -> int:
        if opened.state.state == "committing":
            return (opened.committing_since_ms or self._now_ms()) + self.grace_ms
        due = txn.next_check_ms(opened.state)
        return self._now_ms() if due is None else due

    async def _check(self, txn_id: str, opened: _Open) -> None:
        checks = opened.state.checks + 1
        eid = secrets.token_hex(8)
        self._mine.add(eid)
        await self._log.append(txn_id, {"kind": "check", "id": txn_id, "eid": eid})
        self._apply(opened, {"kind": "check", "id": txn_id, "ts": self._now_ms()})
        self.counters.checks += 1
        try:
            answer = await self._ask(opened.state.check_url, {"id": txn_id, "checks": checks})
        except Exception as exc:  # the adapter answers unknown itself; this is a bug guard
            _log.warning("txn.check_failed", txn=txn_id, error=f"{type(exc).__name__}: {exc}")
            answer = "unknown"
        if answer == "unknown":
            self.counters.check_failures += 1
        entry = txn.after_check(opened.state, answer, self.max_checks)
        _log.info("txn.checked", txn=txn_id, checks=checks, answer=answer, outcome=entry and entry["kind"])
        if entry is None:
            return
        # This owner may be behind the log: the producer's own commit or rollback can already be
        # there, unseen. So the decision is not applied here; its echo is awaited, and by then
        # every entry before it was applied: only if this decision came first does it stand.
        decision = secrets.token_hex(8)
        echoed = self._echoes[decision] = asyncio.Event()
        try:
            await self._log.append(txn_id, {**entry, "eid": decision})
            await asyncio.wait_for(echoed.wait(), timeout=ECHO_WAIT_S)
        except TimeoutError:
            return  # not seen yet: the decision, when it arrives, is handled like anyone's
        finally:
            self._echoes.pop(decision, None)
        state = opened.state
        if state.state == "committing" and state.decided_by == decision:
            await self._finish(txn_id, opened, after_crash=False)

    async def _finish(self, txn_id: str, opened: _Open, *, after_crash: bool) -> None:
        """Write a committing transaction's records, then log ``committed``."""
        results = await self._write(txn_id, list(opened.prepare.get("records", ())))
        entry = {"kind": "committed", "id": txn_id, "results": results}
        await self._log.append(txn_id, entry)
        self._apply(opened, entry)
        if after_crash:
            self.counters.finished_after_crash += 1
            _log.warning("txn.finished_commit", txn=txn_id, records=len(results))

    # --- what the status shows ----------------------------------------------------------------

    def oldest_prepared_age_s(self) -> float:
        return txn.oldest_prepared_age_s([o.state for o in self.open.values()], self._now_ms())
