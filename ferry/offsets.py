"""The offset record (docs/contract.md §5): codec and the "latest state per key" rule.

Written by a worker's offset merge to the compacted offsets topic, read back by the next owner
of the partition on restore, and by the Spark replay. All three use :func:`decode_value` and
:func:`supersedes`, so Spark's final state and a worker's restore cannot disagree.

Key: ``<subscription>/<topic>/<partition>`` (UTF-8). Value (UTF-8 JSON)::

    {"v": 1, "committed": 1200, "acked": [[1203, 1210], [1212, 1213]],
     "epoch": 7, "worker": "worker-2", "ts": 1763800000000}

A null value (tombstone) deletes the key's state; the next owner starts from the
subscription's ``start_from``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ferry.errors import OffsetRecordError
from ferry.subscription import PartitionRef

VERSION = 1


@dataclass(frozen=True, slots=True)
class OffsetState:
    committed: int
    """Every offset below it is acknowledged (or dead-lettered)."""
    acked: tuple[tuple[int, int], ...]
    """Half-open ranges above ``committed`` already acknowledged, sorted, disjoint, non-adjacent."""
    epoch: int
    worker: str
    ts: int
    """Wall-clock milliseconds when the state was written."""

    def is_acked(self, offset: int) -> bool:
        if offset < self.committed:
            return True
        return any(lo <= offset < hi for lo, hi in self.acked)


def encode_key(ref: PartitionRef) -> bytes:
    return ref.key().encode()


def decode_key(raw: bytes | str) -> PartitionRef:
    """Split on the last two '/': subscription names cannot hold '/', topic names neither."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    parts = text.rsplit("/", 2)
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise OffsetRecordError(f"offset record key {text!r} is not <subscription>/<topic>/<partition>")
    try:
        partition = int(parts[2])
    except ValueError:
        raise OffsetRecordError(f"offset record key {text!r} has a non-integer partition") from None
    return PartitionRef(parts[0], parts[1], partition)


def encode_value(state: OffsetState) -> bytes:
    doc = {
        "v": VERSION,
        "committed": state.committed,
        "acked": [[lo, hi] for lo, hi in state.acked],
        "epoch": state.epoch,
        "worker": state.worker,
        "ts": state.ts,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetRecordError(f"offset record field {key!r} must be an integer, got {value!r}")
    return value


def decode_value(raw: bytes | str) -> OffsetState:
    """Decode and check one value; raises :class:`OffsetRecordError` naming what is wrong."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise OffsetRecordError(f"offset record value is not UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OffsetRecordError("offset record value must be a JSON object")
    if doc.get("v") != VERSION:
        raise OffsetRecordError(f"offset record version {doc.get('v')!r} is not supported (expected {VERSION})")
    committed = _int(doc, "committed")
    epoch = _int(doc, "epoch")
    ts = _int(doc, "ts")
    worker = doc.get("worker")
    if not isinstance(worker, str):
        raise OffsetRecordError("offset record field 'worker' must be a string")
    if committed < 0 or epoch < 0:
        raise OffsetRecordError("offset record 'committed' and 'epoch' must be >= 0")
    acked_raw = doc.get("acked")
    if not isinstance(acked_raw, list):
        raise OffsetRecordError("offset record field 'acked' must be a list of [lo, hi] pairs")
    acked: list[tuple[int, int]] = []
    floor = committed
    for pair in acked_raw:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
        ):
            raise OffsetRecordError(f"offset record acked range {pair!r} is not [lo, hi]")
        lo, hi = pair
        # Ranges must lie above committed, ascend, and leave a gap between each other.
        if lo <= floor or hi <= lo:
            raise OffsetRecordError(
                f"offset record acked ranges {acked_raw!r} are not sorted gapped ranges above committed"
            )
        acked.append((lo, hi))
        floor = hi
    return OffsetState(committed=committed, acked=tuple(acked), epoch=epoch, worker=worker, ts=ts)


def supersedes(new: OffsetState, current: OffsetState | None) -> bool:
    """Whether ``new``, read after ``current`` in log order, becomes the key's state.

    The highest epoch wins; within one epoch the later record wins. A record with a lower
    epoch than one already seen is stale (a fenced-out owner) and is ignored.
    """
    return current is None or new.epoch >= current.epoch


def is_stale(new: OffsetState, current: OffsetState | None) -> bool:
    """A write from an owner already fenced out: its epoch is below one seen for the key."""
    return current is not None and new.epoch < current.epoch


def fold(states: Iterable[OffsetState | None]) -> OffsetState | None:
    """The state a new owner restores from one key's records, in log order.

    ``None`` is a tombstone: it clears the key. Stale records (lower epoch than one already
    seen) are skipped. The worker's restore and the Spark replay both call this, so they agree.
    """
    current: OffsetState | None = None
    for state in states:
        if state is None:
            current = None
        elif supersedes(state, current):
            current = state
    return current


class StateTable:
    """The current state of every key of an offsets topic, kept up to date record by record.

    Use case: a reader that comes back to the topic again and again (a worker restoring the
    partitions it takes over, the portal's status page) applies each record once, in log order,
    with the rule of :func:`fold`, and remembers where each partition was read up to, so its
    next read starts there instead of at the beginning. Pure: the caller does the reading.
    """

    __slots__ = ("positions", "states")

    def __init__(self) -> None:
        self.states: dict[bytes, OffsetState] = {}
        self.positions: dict[int, int] = {}
        """Per partition of the offsets topic: the next offset to read."""

    def apply(self, partition: int, offset: int, key: bytes, raw: bytes | None) -> OffsetState | None:
        """Apply one record. Returns the state now current for the key.

        Raises :class:`OffsetRecordError` for a value that does not decode, and
        :class:`StaleOffsetRecord` for a stale write; either way the record is consumed and the
        key keeps its state.
        """
        self.positions[partition] = offset + 1
        if raw is None:
            self.states.pop(key, None)  # tombstone
            return None
        state = decode_value(raw)
        current = self.states.get(key)
        if not supersedes(state, current):
            assert current is not None
            raise StaleOffsetRecord(
                f"offset record at {partition}/{offset} has epoch {state.epoch}, "
                f"below epoch {current.epoch} already seen for its key: a fenced-out owner wrote it"
            )
        self.states[key] = state
        return state

    def get(self, key: bytes) -> OffsetState | None:
        return self.states.get(key)


class StaleOffsetRecord(OffsetRecordError):
    """A record written by an owner already fenced out (lower epoch than one already seen)."""
