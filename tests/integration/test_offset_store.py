"""The worker's restore against the real broker: incremental reads of the offsets topic agree with
a full read, see every write made before the restore was asked for, and read only the tail."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from ferry import kafka
from ferry.offsets import OffsetState, encode_key, encode_value
from ferry.subscription import PartitionRef
from ferry.worker.offset_store import OffsetStore
from ferry.worker.producer import AsyncProducer
from tests.support.kafka import offset_states, produce

pytestmark = pytest.mark.integration

A, B, C = PartitionRef("s", "t", 0), PartitionRef("s", "t", 1), PartitionRef("s2", "t", 0)


def st(committed: int, epoch: int, acked: tuple[tuple[int, int], ...] = ()) -> OffsetState:
    return OffsetState(committed, acked, epoch, f"w{epoch}", 1_763_800_000_000 + committed)


@pytest.fixture()
def store(kafka_bootstrap: str) -> Iterator[tuple[OffsetStore, str]]:
    topic = f"__offsets-os-{secrets.token_hex(3)}"
    cfg = {"bootstrap.servers": kafka_bootstrap}
    assert kafka.ensure_topic(cfg, topic, 3, {"cleanup.policy": "compact"})
    producer = AsyncProducer(cfg)
    s = OffsetStore(cfg, topic, producer)
    try:
        yield s, topic
    finally:
        s.close()
        producer.close()


def write(bootstrap: str, topic: str, *records: tuple[PartitionRef, OffsetState | None]) -> None:
    # Keys of one ref always land in one partition (as the worker's keyed producer does).
    produce(
        bootstrap,
        topic,
        ((encode_key(ref), None if s is None else encode_value(s), ref.partition % 3) for ref, s in records),
    )


def test_incremental_restore_reads_only_the_tail_and_agrees_with_a_full_read(
    kafka_bootstrap: str, store: tuple[OffsetStore, str]
) -> None:
    s, topic = store
    assert s.read_states([A]) == {A: None}  # empty topic: ends at EOF at once
    write(kafka_bootstrap, topic, (A, st(10, 1, ((12, 15),))), (B, st(5, 1)), (C, st(7, 3)))
    assert s.read_states([A, B]) == {A: st(10, 1, ((12, 15),)), B: st(5, 1)}
    assert s.records_read == 3

    # A new owner (epoch 2) of A, a stale write by B's fenced owner, C deleted.
    write(kafka_bootstrap, topic, (A, st(20, 2)), (B, st(9, 0)), (C, None))
    got = s.read_states([A, B, C])
    assert got == {A: st(20, 2), B: st(5, 1), C: None}
    assert s.records_read == 6, "the second restore read only the three new records"

    # Nothing new: the read still ends (at EOF) and reads nothing.
    assert s.read_states([A]) == {A: st(20, 2)}
    assert s.records_read == 6

    # After a tombstone any epoch starts over, as in ferry.offsets.fold.
    write(kafka_bootstrap, topic, (C, st(1, 1)))
    assert s.read_states([C]) == {C: st(1, 1)}

    full = offset_states(kafka_bootstrap, topic)
    assert {ref: full.get(ref) for ref in (A, B, C)} == s.read_states([A, B, C])
