"""Transactional (half) messages: the state of one transaction, folded from its log.

Use case: a producer writes its database and "sends" an event in one local transaction. It prepares
the records through the gateway (durable, invisible), commits or rolls back after its local
transaction, and is asked by a back-check when it did neither in time (docs/contract.md §11,
docs/design/transactions.md).

Everything about a transaction is an entry in the transaction log (the internal topic
``__ferry_txn``, keyed by transaction id, so one transaction's entries are totally ordered in one
partition). This module is the pure part: what state a sequence of entries means, what a verb does
in a state, and when the next back-check is due.

States::

    prepared ──commit──▶ committing ──(records written)──▶ committed
        │                    ▲
        │ rollback           └── check answered "commit"
        ▼
    rolled_back ◀── check answered "rollback", or "unknown" FERRY_TXN_MAX_CHECKS times

``committing`` is the decision to commit, recorded before any record is written: from it the
transaction can only end ``committed`` (whoever owns the partition finishes the writes after a
crash), never ``rolled_back``. The first decision in the log wins; a later contrary one is refused
(409). Repeating a verb answers as the first time (idempotent).

Pure: entries are plain dicts as they are stored (JSON); the caller passes the time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

State = Literal["prepared", "committing", "committed", "rolled_back"]
Verb = Literal["commit", "rollback"]
CheckAnswer = Literal["commit", "rollback", "unknown"]

FIRST_CHECK_BACKOFF_MS = 1_000  # after timeout_ms, unknown answers are asked again: 1 s, 2 s, 4 s …
MAX_CHECK_BACKOFF_MS = 60_000  # … up to a minute apart (RocketMQ checks every 60 s)
DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_MAX_CHECKS = 15


class TxnError(Exception):
    """The root of transaction errors; each carries the HTTP status the gateway answers."""

    status = 400


class UnknownTransaction(TxnError):
    status = 404


class Forbidden(TxnError):
    """The caller may not write to a topic of the transaction, so it may not act on it."""

    status = 403


class Conflict(TxnError):
    status = 409


@dataclass(frozen=True, slots=True)
class Txn:
    """What the log says of one transaction."""

    id: str
    state: State
    created_ms: int
    timeout_ms: int
    check_url: str
    records: int  # how many records it holds
    checks: int = 0
    last_check_ms: int | None = None
    reason: str | None = None  # why it ended rolled back: "producer", "check", "max_checks"
    decided_ms: int | None = field(default=None, compare=False)
    """When the decision that stands was logged (its entry's ``ts``)."""
    decided_by: str | None = field(default=None, compare=False)
    """The ``eid`` of the entry whose decision stands (the first one), when it carried one: a
    commit that finds its own decision there writes the records; any other waits for whoever
    decided to write them."""
    results: list[dict[str, Any]] | None = field(default=None, compare=False)

    @property
    def final(self) -> bool:
        return self.state in ("committed", "rolled_back")

    def public(self) -> dict[str, Any]:
        """The answer of ``GET /api/v1/transactions/{id}`` (``committing`` shows as committed: the
        decision is final and the records are being written)."""
        shown = "committed" if self.state == "committing" else self.state
        return {"id": self.id, "state": shown, "checks": self.checks}


def apply(txn: Txn | None, entry: dict[str, Any]) -> Txn | None:
    """The transaction after one more log entry. Entries that the state does not allow (a second
    decision, an entry for an unknown transaction) change nothing: the first decision wins."""
    kind = entry["kind"]
    if kind == "prepare":
        if txn is not None:
            return txn  # a repeated prepare (a retried produce) is the same transaction
        return Txn(
            id=entry["id"],
            state="prepared",
            created_ms=int(entry["ts"]),
            timeout_ms=int(entry.get("timeout_ms", DEFAULT_TIMEOUT_MS)),
            check_url=str(entry.get("check_url", "")),
            records=len(entry.get("records", ())),
        )
    if txn is None:
        return None
    if kind == "check":
        if txn.state != "prepared":
            return txn
        return replace(txn, checks=txn.checks + 1, last_check_ms=int(entry["ts"]))
    if kind == "commit":
        if txn.state != "prepared":
            return txn
        ts = entry.get("ts")
        decided_ms = int(ts) if isinstance(ts, int | float) else None
        return replace(txn, state="committing", decided_by=entry.get("eid"), decided_ms=decided_ms)
    if kind == "committed":
        if txn.state in ("prepared", "committing"):
            return replace(txn, state="committed", results=committed_results(entry.get("results")))
        return txn
    if kind == "rollback":
        if txn.state == "prepared":
            return replace(txn, state="rolled_back", reason=str(entry.get("reason", "producer")))
        return txn
    raise ValueError(f"unknown transaction log entry kind {kind!r}")


UNKNOWN_POSITION: dict[str, Any] = {"partition": None, "offset": None}
"""The answer for a record whose ``committed`` entry says it was written but not where."""


def committed_results(logged: Any) -> list[dict[str, Any]] | None:
    """The per-record results (§9) a ``committed`` entry logged, as a commit answers them. Entries
    the back-check logged before it kept where each record went hold ``{"written": true}``: the
    record was written and acknowledged, its partition and offset are not known, so it answers
    :data:`UNKNOWN_POSITION` — success, in the shape of §9, never an error (the records are in
    their topics; a producer must not be led to write them again)."""
    if not isinstance(logged, list):
        return None
    return [dict(UNKNOWN_POSITION) if r == {"written": True} else r for r in logged]


def fold(entries: list[dict[str, Any]]) -> dict[str, Txn]:
    """Every transaction of a log partition, from its entries in log order."""
    out: dict[str, Txn] = {}
    for shared in entries:
        for entry in expand(shared):
            after = apply(out.get(entry["id"]), entry)
            if after is not None:
                out[entry["id"]] = after
    return out


def expand(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries one log entry stands for, one per transaction: a ``committed`` entry may carry,
    beside its own transaction's results, those of other transactions of its partition committed
    at the same time (``more``: id → results), so that one write logs them all."""
    more = _more(entry)
    if not more:
        return [entry]
    out = [{k: v for k, v in entry.items() if k != "more"}]
    out.extend(_committed(txn_id, results, entry) for txn_id, results in more.items() if isinstance(txn_id, str))
    return out


def concerning(entry: dict[str, Any], txn_id: str) -> dict[str, Any] | None:
    """The entry as it concerns ``txn_id``: itself when it is that transaction's (or names none, as a
    prepare read back by its position), that transaction's part of a shared ``committed`` entry
    (:func:`expand`), else None."""
    own = entry.get("id", txn_id)
    if own == txn_id:
        return entry if "more" not in entry else expand(entry)[0]
    more = _more(entry)
    if more is not None and txn_id in more:
        return _committed(txn_id, more[txn_id], entry)
    return None


def _more(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The other transactions' results a shared ``committed`` entry holds (id → results), or None."""
    more = entry.get("more") if entry.get("kind") == "committed" else None
    return more if isinstance(more, dict) else None


def _committed(txn_id: str, results: Any, shared: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "committed", "id": txn_id, "results": results, "ts": shared.get("ts")}


Answer = Literal["append", "same", "finish"]


def decide(txn: Txn | None, verb: Verb, txn_id: str) -> Answer:
    """What a ``commit`` or ``rollback`` request does in the transaction's current state:
    ``append`` its decision to the log, answer the ``same`` as before (repeated verb), or ``finish``
    a commit whose decision is already logged (write the records that may be missing, then
    ``committed``). :class:`UnknownTransaction` (404) or :class:`Conflict` (409) otherwise."""
    if txn is None:
        raise UnknownTransaction(f"no transaction {txn_id!r} (unknown, or older than the transaction log keeps)")
    if verb == "commit":
        if txn.state == "prepared":
            return "append"
        if txn.state == "committing":
            return "finish"
        if txn.state == "committed":
            return "same"
        raise Conflict(f"transaction {txn_id!r} was rolled back ({txn.reason or 'producer'}); it cannot be committed")
    if txn.state == "prepared":
        return "append"
    if txn.state == "rolled_back":
        return "same"
    raise Conflict(f"transaction {txn_id!r} is committed; it cannot be rolled back")


def next_check_ms(txn: Txn) -> int | None:
    """When the back-check of a prepared transaction is due: its timeout after it was prepared,
    then after each unanswered check a backoff that doubles from 1 s up to a minute. None once the
    transaction left ``prepared``."""
    if txn.state != "prepared":
        return None
    if txn.last_check_ms is None:
        return txn.created_ms + txn.timeout_ms
    backoff = min(MAX_CHECK_BACKOFF_MS, FIRST_CHECK_BACKOFF_MS * 2 ** min(txn.checks - 1, 30))
    return int(txn.last_check_ms + backoff)


def after_check(txn: Txn, answer: CheckAnswer, max_checks: int = DEFAULT_MAX_CHECKS) -> dict[str, Any] | None:
    """The log entry that resolves a transaction after a check (its ``check`` entry already
    counted): ``commit`` or ``rollback`` as the producer said, ``rollback`` with reason
    ``max_checks`` when the producer said ``unknown`` (or nothing usable) ``max_checks`` times,
    else None (ask again later)."""
    if txn.state != "prepared":
        return None
    if answer == "commit":
        return {"kind": "commit", "id": txn.id, "by": "check"}
    if answer == "rollback":
        return {"kind": "rollback", "id": txn.id, "reason": "check"}
    if txn.checks >= max_checks:
        return {"kind": "rollback", "id": txn.id, "reason": "max_checks"}
    return None


def parse_check_answer(status: int, body: bytes) -> CheckAnswer:
    """The producer's answer to a back-check: a 2xx with ``{"state": "commit"|"rollback"|
    "unknown"}``; anything else (another status, garbage, another state) counts as unknown."""
    if not 200 <= status < 300:
        return "unknown"
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "unknown"
    state = doc.get("state") if isinstance(doc, dict) else None
    return state if state in ("commit", "rollback", "unknown") else "unknown"


def oldest_prepared_age_s(txns: list[Txn], now_ms: int) -> float:
    """Age of the oldest prepared transaction in seconds (0 when none): the metric that says a
    producer's check endpoint is not resolving its transactions."""
    ages = [now_ms - t.created_ms for t in txns if t.state == "prepared"]
    return max(ages) / 1000 if ages else 0.0


def checks_to_give_up(max_checks: int = DEFAULT_MAX_CHECKS) -> float:
    """Seconds from the first check to the final rollback when every answer is unknown (for docs)."""
    total, checks = 0, 1
    while checks < max_checks:
        total += min(MAX_CHECK_BACKOFF_MS, FIRST_CHECK_BACKOFF_MS * 2 ** (checks - 1))
        checks += 1
    return math.ceil(total / 1000)
