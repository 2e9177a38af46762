"""Record trace: where one record of a subscription is, decided from what Ferry already knows.

Use case: an operator asks "did my order 4711 arrive?". Ferry keeps no per-record log; it answers
from four things it has anyway (docs/contract.md §12):

- the partition's merged offset state (``committed`` + acked ranges): acknowledged or not;
- the owning worker's live window, if it holds the record: in flight, or waiting for a retry, with
  its attempts, last answer and next attempt; for a record acknowledged in its partition but not
  done (a durable retry waiting in the delay store, a record of the retry topic being pushed),
  what the worker holding it says;
- the dead-letter topic, for an acknowledged record: was it acknowledged by being dead-lettered;
- the subscription's filter, for an acknowledged record: was it acknowledged without a push;
- the log's start and end: is the offset in the log at all.

States: ``not_in_log`` (below the log start or at/after its end), ``in_flight``,
``waiting_retry``, ``dead_lettered``, ``filtered``, ``delivered`` (every other acknowledged
offset), ``not_yet_fetched`` (in the log, not acknowledged, not held by a worker).

Pure: the caller gathers the facts (the portal: offsets topic, the owner's ``/stats``, a bounded
dead-letter lookup, the compiled filter) and this decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

TraceState = Literal[
    "not_yet_fetched", "in_flight", "waiting_retry", "delivered", "dead_lettered", "filtered", "not_in_log"
]


@dataclass(frozen=True, slots=True)
class Live:
    """What the owning worker's window says of one record it holds."""

    state: Literal["in_flight", "waiting_retry"]
    attempts: int
    last_status: int | None = None
    last_error: str | None = None
    next_attempt_at: int | None = None  # epoch ms, for waiting_retry


@dataclass(frozen=True, slots=True)
class DeadLetter:
    attempts: int
    error: str


def acknowledged(offset: int, committed: int | None, acked: Sequence[Sequence[int]]) -> bool:
    """Whether the offset state says ``offset`` is acknowledged: below ``committed`` or inside a
    half-open acked range."""
    if committed is not None and offset < committed:
        return True
    return any(lo <= offset < hi for lo, hi in acked)


def decide(
    *,
    topic: str,
    partition: int,
    offset: int,
    log_start: int,
    log_end: int,
    committed: int | None,
    acked: Sequence[Sequence[int]] = (),
    worker: str | None = None,
    live: Live | None = None,
    retrying: Live | None = None,
    retrying_worker: str | None = None,
    dead_letter: DeadLetter | None = None,
    filtered: bool = False,
) -> dict[str, Any]:
    """The answer of ``GET …/records/{topic}/{partition}/{offset}``; fields that do not apply are
    None. ``filtered``: the subscription's filter rejects this record (the caller evaluates it
    only for an acknowledged record it could read). ``retrying``: an acknowledged record that is
    not done (a durable retry, a redriven dead letter), as ``retrying_worker`` holds it."""
    answer: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "state": "not_yet_fetched",
        "attempts": None,
        "last_status": None,
        "last_error": None,
        "worker": None,
        "next_attempt_at": None,
    }
    state: TraceState
    if offset < log_start or offset >= log_end:
        state = "not_in_log"
    elif acknowledged(offset, committed, acked):
        if retrying is not None:
            state = retrying.state
            answer.update(_live_fields(retrying, retrying_worker))
        elif dead_letter is not None:
            state = "dead_lettered"
            answer.update(
                attempts=dead_letter.attempts, last_error=dead_letter.error, last_status=_status_in(dead_letter.error)
            )
        elif filtered:
            state = "filtered"
        else:
            state = "delivered"
    elif live is not None:
        state = live.state
        answer.update(_live_fields(live, worker))
    else:
        state = "not_yet_fetched"
        answer["worker"] = worker
    answer["state"] = state
    return answer


_ANSWERED = re.compile(r"endpoint answered (\d{3})\b")


def _live_fields(live: Live, worker: str | None) -> dict[str, Any]:
    """What a worker publishes about a record it holds (pushing it, or waiting to retry it)."""
    return {
        "attempts": live.attempts,
        "last_status": live.last_status,
        "last_error": live.last_error,
        "worker": worker,
        "next_attempt_at": live.next_attempt_at if live.state == "waiting_retry" else None,
    }


def _status_in(error: str) -> int | None:
    """The endpoint's last HTTP status, as the worker wrote it into a dead letter's ``ferry-error``
    ("endpoint answered 500; gave up after 5 attempts"); None for a timeout or a refused connection."""
    m = _ANSWERED.search(error)
    return int(m.group(1)) if m else None
