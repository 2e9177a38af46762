"""worker/_records.c against its reference, worker.fetch.build_batch_py, on the same messages.

The C module must be built (setup.py; CI has a compiler): a missing module fails here instead of
skipping (tests/support/native.py), or a broken build would pass unnoticed.
"""

from __future__ import annotations

import random
import resource
import sys
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from ferry.worker import fetch
from ferry.worker.push import NO_HEADERS, Record
from tests.support.native import required


def _native(msgs: list[Message], header_sets: dict[Any, Any]) -> fetch.Built:
    return fetch._native_call(required("ferry.worker._records").build, msgs, header_sets)


def msg(
    topic: str = "t",
    partition: int = 0,
    offset: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[str, bytes | None]] | None = None,
    ts: int = 1_700_000_000_000,
    error: KafkaError | None = None,
) -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=headers,
        timestamp=(1, ts),
        error=error,
    )


def _same(got: fetch.Built, want: fetch.Built) -> None:
    records, eof, errors = got
    assert records == want[0]
    assert {tp: [type(r) for r in rs] for tp, rs in records.items()} == {
        tp: [Record] * len(rs) for tp, rs in want[0].items()
    }
    assert eof == want[1]
    assert [(t, p, e.code()) for t, p, e in errors] == [(t, p, e.code()) for t, p, e in want[2]]


CASES: list[tuple[str, list[Message]]] = [
    ("empty", []),
    ("one", [msg()]),
    ("null key and value", [msg(key=None, value=None)]),
    ("empty key and value", [msg(key=b"", value=b"")]),
    ("headers, one null", [msg(headers=[("content-type", b"application/json"), ("x", None)])]),
    ("interleaved partitions", [msg(partition=p % 3, offset=p) for p in range(9)]),
    ("two topics", [msg(topic="a", offset=1), msg(topic="b", offset=1), msg(topic="a", offset=2)]),
    ("eof", [msg(offset=3), msg(offset=4, error=KafkaError(KafkaError._PARTITION_EOF))]),
    ("other error", [msg(error=KafkaError(KafkaError._TRANSPORT)), msg(offset=7)]),
    ("timestamp -1", [msg(ts=-1)]),
    # Record counts `len(x) if x else 0`: a falsy payload that has no len() counts 0.
    ("falsy key and value that are not bytes", [msg(key=0, value=False)]),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "msgs"), CASES, ids=[c[0] for c in CASES])
def test_native_equals_reference(name: str, msgs: list[Message]) -> None:
    _same(_native(msgs, {}), fetch.build_batch_py(msgs, {}))


def test_records_are_records() -> None:
    (records, _, _) = _native([msg(key=b"ab", value=b"xyz", headers=[("h", b"1")], offset=9)], {})
    (r,) = records[("t", 0)]
    assert isinstance(r, Record)
    assert (r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.size) == (
        "t",
        0,
        9,
        b"ab",
        b"xyz",
        (("h", b"1"),),
        2 + 3 + 64,
    )
    assert r == Record("t", 0, 9, b"ab", b"xyz", [("h", b"1")], 1_700_000_000_000)


def test_records_hash_as_tuples() -> None:
    """CPython 3.14+ caches a tuple's hash in the object (-1: not computed yet); the C build must
    leave it unset, as tuple.__new__ does, or every record would hash as 0."""
    (records, _, _) = _native([msg(offset=o, headers=[("h", b"1")]) for o in range(3)], {})
    for r in records[("t", 0)]:
        assert hash(r) == hash(tuple(r)) == hash(Record(*r[:7]))
    assert len(set(records[("t", 0)])) == 3


def test_header_sets_are_shared_and_bounded() -> None:
    sets: dict[Any, Any] = {}
    records, _, _ = _native([msg(offset=i, headers=[("h", b"1")]) for i in range(3)] + [msg(offset=3)], sets)
    rs = records[("t", 0)]
    assert rs[0].headers is rs[1].headers is rs[2].headers
    assert rs[3].headers is NO_HEADERS
    for i in range(fetch._HEADER_SETS_MAX + 5):
        _native([msg(headers=[("h", str(i).encode())])], sets)
    assert len(sets) <= fetch._HEADER_SETS_MAX


def test_random_batches_match_and_do_not_leak() -> None:
    rng = random.Random(8)

    def batch() -> list[Message]:
        out = []
        for i in range(200):
            roll = rng.random()
            error = KafkaError(KafkaError._PARTITION_EOF) if roll < 0.02 else None
            out.append(
                msg(
                    topic=rng.choice(("a", "b")),
                    partition=rng.randrange(4),
                    offset=i,
                    key=rng.choice((None, b"", b"k" * rng.randrange(1, 40))),
                    value=rng.choice((None, b"", bytes(rng.randrange(256) for _ in range(rng.randrange(200))))),
                    headers=rng.choice((None, [], [("content-type", b"text/plain")], [("a", b"1"), ("b", None)])),
                    ts=rng.choice((-1, 0, rng.randrange(2**41))),
                    error=error,
                )
            )
        return out

    batches = [batch() for _ in range(20)]
    for b in batches:
        _same(_native(b, {}), fetch.build_batch_py(b, {}))
    # Every reference counted once too many would keep a record alive: memory would grow with
    # the number of builds. 2,000 builds of 200 messages, RSS measured after a warm-up.
    for b in batches:
        _native(b, {})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(100):
        for b in batches:
            _native(b, {})
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 20_000, f"RSS grew {grown_kb} KB over 400,000 records built"


def test_the_fetcher_runs_the_native_build() -> None:
    required("ferry.worker._records")
    assert fetch.build_batch is not fetch.build_batch_py


class _Huge:
    """A payload whose len() is the largest a length can be."""

    def __len__(self) -> int:
        return sys.maxsize


def test_size_of_payloads_with_the_largest_lengths() -> None:
    """key + value + 64 beyond Py_ssize_t: Python's int, no overflow."""
    msgs = [msg(key=_Huge(), value=_Huge())]  # type: ignore[arg-type]
    _same(_native(msgs, {}), fetch.build_batch_py(msgs, {}))
    assert _native(msgs, {})[0][("t", 0)][0].size == 2 * sys.maxsize + 64


class _PyMessage:
    """A message of another type, whose accessors are Python code: it may change the list being built."""

    def __init__(self, offset: int, on_error: Callable[[], object] | None = None) -> None:
        self._offset = offset
        self._on_error = on_error

    def error(self) -> None:
        if self._on_error is not None:
            self._on_error()

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


def test_messages_list_changed_while_building() -> None:
    """An accessor that empties the list frees the messages it held: the build must neither read
    the freed list nor use the freed message, and stops where a for loop over the list stops."""

    def run(build: Callable[[list[Message], dict[Any, Any]], fetch.Built]) -> fetch.Built:
        msgs: list[Any] = []
        msgs += [_PyMessage(0, msgs.clear), _PyMessage(1), _PyMessage(2)]
        return build(msgs, {})

    want = run(fetch.build_batch_py)
    assert [r.offset for r in want[0][("t", 0)]] == [0]
    _same(run(_native), want)
