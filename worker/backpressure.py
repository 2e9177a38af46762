"""Backpressure: how a partition's buffer slows its fetch down without losing what was fetched.

Use case: a partition's records wait in its window until they are pushed, and the worker bounds
them per partition (``FERRY_PREFETCH_RECORDS`` / ``FERRY_PREFETCH_BYTES``). Pausing the partition
in librdkafka is the hard stop, but librdkafka throws away what it had already fetched for a
paused partition and fetches it again after the resume. When an endpoint is the bottleneck, every
partition fills and drains over and over, and the broker served each record several times.

So a filling partition first *holds*. The fetch thread (:mod:`ferry.worker.fetch`) stops calling
``consume()`` while every partition it reads holds; librdkafka's own queue, which is bounded, then
stops its fetching, and nothing is thrown away. A held partition still receives records whenever
another partition of the same consumer is consumed, because librdkafka has one queue per consumer;
only when such records bring it to its bound is it paused.

States of a partition's fetch: open → held (``HOLD_AT`` of a bound) → paused (a bound reached) →
open again once at most ``RELEASE_AT`` of the records are buffered and the bytes are under their
bound. Pure: the runner calls :func:`next_gate` after every change to its buffer and tells the
fetcher when the state changes.
"""

from __future__ import annotations

from enum import IntEnum


class Gate(IntEnum):
    OPEN = 0
    """Fetched and consumed as fast as records come."""
    HELD = 1
    """Full enough: the fetch thread may stop consuming (when every partition it reads holds)."""
    PAUSED = 2
    """At its bound: paused in librdkafka, whatever the other partitions do."""


HOLD_AT = 5 / 8
"""Share of a bound (records or bytes) at which a partition holds. Below the bound, so that records
still arriving for a held partition (another partition's consumption brings them) rarely reach it;
above ``RELEASE_AT``, so that a drained partition is open for a while before it holds again."""

RELEASE_AT = 1 / 2
"""Share of the record bound a partition must drain to before its fetch opens again."""

CONSUME_MAX = 250
"""Records the fetch thread takes from librdkafka at once, at most, unless
``FERRY_FETCH_BATCH_RECORDS`` says otherwise. Each batch costs the event loop a wake-up and a pass
over the partitions it holds, and costs the fetch thread a hand-over; but while the thread turns a
batch into records it holds the GIL throughout (about 1 µs a record), and the event loop, answering
the pushes, waits. With ``ordering`` ``partition`` a partition has one batch in flight, so that
wait is lost throughput. In bench/batch.py runs (1,000,000 records, a 2-core AMD EPYC machine)
250 did about a fifth more records/s than 1,000 with ``ordering`` ``key`` and ``none``, and as
well with ``partition``; 2,000 costs more CPU per record than either (python3 -m
bench.consume_cost). What one batch holds in bytes is bounded by librdkafka's queue
(``queued.max.messages.kbytes``); a quiet topic's batch is whatever arrived within the consume
timeout."""


def next_gate(gate: Gate, records: int, size: int, max_records: int, max_bytes: int) -> Gate:
    """The gate for a partition buffering ``records`` records of ``size`` bytes, coming from ``gate``."""
    if records >= max_records or size >= max_bytes:
        return Gate.PAUSED
    if gate is not Gate.OPEN and records <= max_records * RELEASE_AT:
        return Gate.OPEN
    if gate is Gate.OPEN and (records >= max_records * HOLD_AT or size >= max_bytes * HOLD_AT):
        return Gate.HELD
    return gate


def consume_batch(max_records: int, most: int = CONSUME_MAX) -> int:
    """How many records the fetch thread may take at once (at most ``most``) for partitions
    bounded at ``max_records``.

    The thread hands the loop one batch at a time, so a partition that holds may still receive the
    batch under way: all of it, if the batch is that partition's. Below the room between the hold
    and the bound, a lone filling partition holds and is never paused."""
    return max(1, min(most, int(max_records * (1 - HOLD_AT))))
