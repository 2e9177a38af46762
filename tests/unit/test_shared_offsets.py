"""The offset record codec (docs/contract.md §5) and the stale-epoch rule."""

from __future__ import annotations

import contextlib
import json
import random

import pytest

from ferry.errors import OffsetRecordError
from ferry.offsets import (
    OffsetState,
    StaleOffsetRecord,
    StateTable,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    fold,
    is_stale,
    supersedes,
)
from ferry.subscription import PartitionRef

CONTRACT_EXAMPLE = (
    b'{"v": 1, "committed": 1200, "acked": [[1203, 1210], [1212, 1213]], "epoch": 7, "worker": "worker-2", '
    b'"ts": 1763800000000}'
)


def state(committed: int = 0, acked: tuple[tuple[int, int], ...] = (), epoch: int = 1) -> OffsetState:
    return OffsetState(committed=committed, acked=acked, epoch=epoch, worker="w", ts=1)


def test_contract_example_decodes() -> None:
    s = decode_value(CONTRACT_EXAMPLE)
    assert s == OffsetState(1200, ((1203, 1210), (1212, 1213)), 7, "worker-2", 1763800000000)
    assert [s.is_acked(o) for o in (1199, 1200, 1203, 1209, 1210, 1212, 1213)] == [
        True,
        False,
        True,
        True,
        False,
        True,
        False,
    ]


def test_value_round_trip_is_contract_json() -> None:
    s = state(5, ((7, 9),), 3)
    raw = encode_value(s)
    assert json.loads(raw) == {"v": 1, "committed": 5, "acked": [[7, 9]], "epoch": 3, "worker": "w", "ts": 1}
    assert decode_value(raw) == s


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"v": 2, "committed": 0, "acked": [], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": "0", "acked": [], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": -1, "acked": [], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [[1]], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 5, "acked": [[5, 7]], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [[3, 5], [5, 7]], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [[7, 9], [3, 5]], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [[3, 3]], "epoch": 0, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [], "epoch": true, "worker": "w", "ts": 0}',
        b'{"v": 1, "committed": 0, "acked": [], "epoch": 0, "worker": 5, "ts": 0}',
    ],
)
def test_bad_values_are_refused(raw: bytes) -> None:
    with pytest.raises(OffsetRecordError):
        decode_value(raw)


@pytest.mark.parametrize(
    ("raw", "ref"),
    [
        (b"orders-to-billing/orders/3", PartitionRef("orders-to-billing", "orders", 3)),
        ("s/t.with.dots/0", PartitionRef("s", "t.with.dots", 0)),
    ],
)
def test_keys(raw: bytes | str, ref: PartitionRef) -> None:
    assert decode_key(raw) == ref
    assert encode_key(ref) == ref.key().encode()


@pytest.mark.parametrize("raw", [b"nokey", b"s/t/x", b"/t/1", b"s//1"])
def test_bad_keys(raw: bytes) -> None:
    with pytest.raises(OffsetRecordError):
        decode_key(raw)


@pytest.mark.parametrize(
    ("new_epoch", "current_epoch", "wins", "stale"),
    [
        (1, None, True, False),
        (2, 1, True, False),
        (2, 2, True, False),  # same owner, later record
        (1, 2, False, True),  # fenced-out owner writing late
    ],
)
def test_epoch_rule(new_epoch: int, current_epoch: int | None, wins: bool, stale: bool) -> None:
    current = None if current_epoch is None else state(epoch=current_epoch)
    assert supersedes(state(epoch=new_epoch), current) is wins
    assert is_stale(state(epoch=new_epoch), current) is stale


@pytest.mark.parametrize(
    ("log", "expect"),
    [
        ([], None),
        ([(5, 1)], (5, 1)),
        ([(5, 1), (9, 1)], (9, 1)),  # later record of the same owner wins
        ([(5, 1), (9, 2), (7, 1)], (9, 2)),  # stale write of a fenced-out owner ignored
        ([(5, 2), (3, 3)], (3, 3)),  # a reset with a new epoch may move back
        ([(5, 2), None], None),  # tombstone
        ([(5, 2), None, (1, 1)], (1, 1)),  # after a tombstone anything goes
    ],
)
def test_fold(log: list[tuple[int, int] | None], expect: tuple[int, int] | None) -> None:
    from ferry.offsets import fold

    got = fold(None if e is None else state(e[0], epoch=e[1]) for e in log)
    assert (None if got is None else (got.committed, got.epoch)) == expect


# A log of one partition: (key, (committed, epoch) | b"bad" for garbage | None for a tombstone).
_LOG = list[tuple[bytes, tuple[int, int] | bytes | None]]


@pytest.mark.parametrize(
    ("log", "expect", "rejected"),
    [
        ([], {}, []),
        ([(b"a", (5, 1)), (b"b", (7, 1)), (b"a", (9, 1))], {b"a": (9, 1), b"b": (7, 1)}, []),
        ([(b"a", (5, 2)), (b"a", (9, 1))], {b"a": (5, 2)}, ["stale"]),  # fenced-out owner
        ([(b"a", (5, 2)), (b"a", None), (b"a", (1, 1))], {b"a": (1, 1)}, []),  # a tombstone starts over
        ([(b"a", (5, 1)), (b"a", b"bad"), (b"b", None)], {b"a": (5, 1)}, ["bad"]),
    ],
)
def test_state_table(log: _LOG, expect: dict[bytes, tuple[int, int]], rejected: list[str]) -> None:
    table = StateTable()
    seen: list[str] = []
    for offset, (key, value) in enumerate(log):
        raw = value if isinstance(value, bytes) or value is None else encode_value(state(*value[:1], epoch=value[1]))
        try:
            table.apply(0, offset, key, raw)
        except StaleOffsetRecord:
            seen.append("stale")
        except OffsetRecordError:
            seen.append("bad")
    assert {k: (s.committed, s.epoch) for k, s in table.states.items()} == expect
    assert seen == rejected
    assert table.positions == ({0: len(log)} if log else {})


def test_state_table_agrees_with_fold_read_in_pieces() -> None:
    """Applying a log in several reads gives, for every key, what fold gives over the whole log."""
    rng = random.Random(3)
    logs: dict[bytes, list[OffsetState | None]] = {}
    table = StateTable()
    for offset in range(2000):
        key = f"k{rng.randrange(20)}".encode()
        value = None if rng.random() < 0.05 else state(offset, epoch=rng.randrange(1, 6))
        logs.setdefault(key, []).append(value)
        with contextlib.suppress(StaleOffsetRecord):
            table.apply(offset % 3, offset, key, None if value is None else encode_value(value))
    assert {k: table.get(k) for k in logs} == {k: fold(v) for k, v in logs.items()}
