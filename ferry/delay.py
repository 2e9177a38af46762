"""Delay levels: where a scheduled record waits next, and what that costs it in rewrites.

Use case: Kafka has no delayed delivery. Ferry keeps scheduled records in Kafka only, in *level*
topics. Every record of one level waits the same constant time ``D``, so records leave a level in
the order they entered it: a level partition's head is always the next record due out of it, and
its owner waits on one timer for the head instead of polling (docs/design/delay.md).

A record carries its due time (``ferry-deliver-at``, epoch ms), its target topic
(``ferry-target-topic``) and, when its producer chose one, the target partition
(``ferry-target-partition``). Whenever a record comes out of a level (or first arrives), its owner
compares the time still to wait, ``remaining = due - now``, with the levels and does one thing:

- ``deliver``: ``remaining <= 0`` — write it to its target topic now;
- ``hold``: ``0 < remaining < FIRST_LEVEL_MS`` — keep it in memory on a timer until due, then
  deliver (this is what gives millisecond precision; memory holds at most the records due within
  ``FIRST_LEVEL_MS``);
- ``wait``: otherwise — write it to the longest level not longer than ``remaining``.

The levels are ``d × 10^k`` milliseconds for ``d`` in 1..9 and ``k`` in 3..9: 1 s up to
9 × 10^9 ms (104 days), one topic per decade (``<delay topic>.<decade>``, e.g.
``__ferry_delay.1s``) with nine partitions, partition ``d - 1`` holding the level ``d × 10^k``.

Why the shortest level is a second: a record written to a level must be fetched back before it is
due, and a fetch under load can take hundreds of milliseconds. A level of 1 s or more leaves the
fetch that time; the last, shorter remainder waits in memory, where only a timer can make it late.
A topic per decade lets each decade's retention follow its own delay (a record lives in a level
topic for at most that level's delay), and nine partitions per decade let the coordinator spread
the levels over workers like any other partitions.

Rewrites: taking the longest level that fits removes the delay's leading decimal digit (in units of
``FIRST_LEVEL_MS``), so a record is written to at most one level per decade below its delay's
leading digit: ``level_writes(delay)`` ≤ 7 for any delay up to 90 days, ≤ 2 below 100 s, then one
write to the target topic. Lateness on the way never makes a record early — each step is decided
from the real ``now`` — it can only move the remainder under a digit boundary, which the bound
above already counts (one write per decade at most).

Pure: no I/O; the caller passes ``now``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, NamedTuple

DELIVER_AT_HEADER = "ferry-deliver-at"
TARGET_TOPIC_HEADER = "ferry-target-topic"
TARGET_PARTITION_HEADER = "ferry-target-partition"
ERROR_HEADER = "ferry-error"
ROUTING_HEADERS = frozenset({TARGET_TOPIC_HEADER, TARGET_PARTITION_HEADER})
"""Where the delay store delivers a record: stripped from the delivered record, which keeps only
``ferry-deliver-at`` of Ferry's headers (docs/contract.md §10)."""

FIRST_LEVEL_MS = 1000  # the shortest level; shorter remainders wait in memory
DECADES = tuple(range(3, 10))  # 10^3 ms .. 10^9 ms
MAX_DELAY_MS = 90 * 24 * 3600 * 1000  # the longest delay accepted (docs/contract.md §10)
LONGEST_LEVEL_MS = 9 * 10**9


@dataclass(frozen=True, slots=True)
class Level:
    """One level: records in it wait ``delay_ms`` after they were written to it."""

    decade: int  # k: the level waits d × 10^k ms
    digit: int  # d: 1..9

    @property
    def delay_ms(self) -> int:
        return int(self.digit * 10**self.decade)

    @property
    def partition(self) -> int:
        return self.digit - 1

    def topic(self, delay_topic: str) -> str:
        return decade_topic(delay_topic, self.decade)


def decade_topic(delay_topic: str, decade: int) -> str:
    """The topic that holds the nine levels of one decade, e.g. ``__ferry_delay.10s``."""
    return f"{delay_topic}.{_unit(10**decade)}"


def _unit(ms: int) -> str:
    for size, suffix in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{suffix}"
    return f"{ms}ms"


LEVELS: tuple[Level, ...] = tuple(Level(k, d) for k in DECADES for d in range(1, 10))


def level_topics(delay_topic: str) -> list[tuple[str, int, int]]:
    """Every level topic with its partition count and the retention it needs, in ms: a record
    stays in a level at most its delay, so twice the decade's longest level plus a day leaves room
    for a worker that was down (operations docs: sizing the delay topics)."""
    return [(decade_topic(delay_topic, k), 9, 2 * 9 * 10**k + 86_400_000) for k in DECADES]


def level_for(remaining_ms: int) -> Level | None:
    """The longest level not longer than ``remaining_ms``; None below the first level."""
    if remaining_ms < FIRST_LEVEL_MS:
        return None
    decade = min(len(str(remaining_ms)) - 1, DECADES[-1])
    digit = min(remaining_ms // 10**decade, 9)
    return Level(decade, digit)


Step = tuple[Literal["deliver"], None] | tuple[Literal["hold"], int] | tuple[Literal["wait"], Level]


def next_step(due_ms: int, now_ms: int) -> Step:
    """What to do with a record due at ``due_ms`` that came out of a level (or arrived) at
    ``now_ms``: deliver it, hold it in memory for the returned milliseconds, or write it to the
    returned level."""
    remaining = due_ms - now_ms
    if remaining <= 0:
        return ("deliver", None)
    level = level_for(remaining)
    if level is None:
        return ("hold", remaining)
    return ("wait", level)


def level_writes(delay_ms: int) -> int:
    """Level writes a record with this delay costs when every level releases it on time: one per
    non-zero decimal digit of ``delay_ms // FIRST_LEVEL_MS``, the top level repeated for delays
    beyond it. The target write comes on top."""
    writes, remaining = 0, delay_ms
    while (level := level_for(remaining)) is not None:
        writes += 1
        remaining -= level.delay_ms
    return writes


class InvalidSchedule(ValueError):
    """A record in the delay topic that cannot be scheduled; goes to ``<delay topic>.dlq`` with
    the message as its ``ferry-error`` header."""


class Schedule(NamedTuple):
    due: int
    """epoch ms"""
    target: str
    partition: int | None = None
    """None: the key (or the producer's partitioner) decides."""


def parse_schedule(headers: list[tuple[str, bytes | None]] | None) -> Schedule:
    """The due time (epoch ms), target topic and optional target partition a plain producer put in
    a record's headers, as docs/contract.md §10 says; :class:`InvalidSchedule` says what is wrong."""
    found: dict[str, bytes | None] = {}
    for name, value in headers or ():
        found.setdefault(name.lower(), value)
    raw_due, raw_target = found.get(DELIVER_AT_HEADER), found.get(TARGET_TOPIC_HEADER)
    if raw_due is None:
        raise InvalidSchedule(f"missing header {DELIVER_AT_HEADER} (epoch milliseconds)")
    try:
        due = int(raw_due.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        got = raw_due[:40]
        raise InvalidSchedule(f"{DELIVER_AT_HEADER} must be an integer (epoch milliseconds), got {got!r}") from None
    if due < 0:
        raise InvalidSchedule(f"{DELIVER_AT_HEADER} must not be negative, got {due}")
    if not raw_target:
        raise InvalidSchedule(f"missing header {TARGET_TOPIC_HEADER} (the topic to deliver to)")
    try:
        target = raw_target.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSchedule(f"{TARGET_TOPIC_HEADER} is not UTF-8: {raw_target[:40]!r}") from None
    if not valid_topic_name(target):
        raise InvalidSchedule(f"{TARGET_TOPIC_HEADER} is not a valid topic name: {target[:60]!r}")
    raw_partition = found.get(TARGET_PARTITION_HEADER)
    if raw_partition is None:
        return Schedule(due, target)
    try:
        partition = int(raw_partition.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        partition = -1
    if partition < 0:
        got = raw_partition[:40]
        raise InvalidSchedule(f"{TARGET_PARTITION_HEADER} must be a partition number (an integer ≥ 0), got {got!r}")
    return Schedule(due, target, partition)


def check_target(schedule: Schedule, partitions: int | None, own_topics: Collection[str]) -> None:
    """A record is delivered only to an existing application topic (and partition): never to an
    internal one (``__``-prefixed, or one of Ferry's configured topics, ``own_topics``), and never
    to a missing one, which a broker with auto-create on would create. ``partitions``: the target's
    partition count, None when it does not exist. :class:`InvalidSchedule` says what is wrong."""
    target = schedule.target
    if target.startswith("__") or target in own_topics:
        raise InvalidSchedule(
            f"{TARGET_TOPIC_HEADER} {target!r} is an internal topic; delayed records go to application topics only"
        )
    if partitions is None:
        raise InvalidSchedule(
            f"{TARGET_TOPIC_HEADER} {target!r} does not exist (the delay store never creates topics); "
            "create it, then produce the record again"
        )
    if schedule.partition is not None and schedule.partition >= partitions:
        raise InvalidSchedule(
            f"{TARGET_PARTITION_HEADER} {schedule.partition} does not exist: "
            f"topic {target!r} has partitions 0-{partitions - 1}"
        )


def delivered_headers(headers: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """The headers of a record delivered to its target: its own and ``ferry-deliver-at``, without
    the routing headers (:data:`ROUTING_HEADERS`, in any letter case)."""
    return [(name, value) for name, value in headers if name.lower() not in ROUTING_HEADERS]


def check_delay(due_ms: int, now_ms: int) -> None:
    """A due time more than ``MAX_DELAY_MS`` ahead is refused; a due time in the past means now."""
    ahead = due_ms - now_ms
    if ahead > MAX_DELAY_MS:
        raise InvalidSchedule(
            f"due {due_ms} is {ahead:,} ms ahead, {ahead - MAX_DELAY_MS:,} ms more than the longest delay "
            f"accepted, 90 days ({MAX_DELAY_MS:,} ms); schedule it at most 90 days ahead"
        )


_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def valid_topic_name(name: str) -> bool:
    """Kafka's own rule: 1-249 characters of ASCII letters, digits, '.', '_' and '-', not '.' or '..'."""
    return _TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")
