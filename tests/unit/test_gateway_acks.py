"""gateway/acks.py and its C twin driven through the same steps: the same acknowledgements, counts,
settled requests and errors (the reference is the Python one)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import orjson
import pytest

from ferry.gateway import acks
from tests.support.native import required


@dataclass
class Rec:
    value: bytes | None
    key: bytes | None


class Msg:
    """What a callback reads of confluent-kafka's Message."""

    def __init__(self, partition: int | None, offset: int | None) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset


ERR = "an error"  # stands for a KafkaError: the collector only stores it and counts it


def items(n: int) -> list[tuple[Rec, str, int]]:
    return [(Rec(f"v{i}".encode(), None if i % 3 == 0 else f"k{i}".encode()), "t", 70) for i in range(n)]


@pytest.fixture(params=["python", "c"])
def impl(request: pytest.FixtureRequest) -> Any:
    if request.param == "python":
        return acks
    module: ModuleType = required("ferry.gateway._acks")
    return module


# Steps: ("ack", i, err, partition, offset) | ("seal", unqueued) | ("take",)
CASES: dict[str, tuple[int, list[tuple[Any, ...]], dict[str, Any]]] = {
    "acked, then sealed: seal settles it": (
        2,
        [("ack", 1, None, 0, 7), ("ack", 0, None, 2, 3), ("seal", 0)],
        {"seal": [True], "done": [], "acks": [(None, 2, 3), (None, 0, 7)], "failed": 0, "left": 0},
    ),
    "sealed, then acked: the last callback hands it over": (
        2,
        [("seal", 0), ("ack", 0, None, 1, 5), ("take",), ("ack", 1, None, 1, 6), ("take",), ("take",)],
        {"seal": [False], "taken": [0, 1, 0], "acks": [(None, 1, 5), (None, 1, 6)], "failed": 0, "left": 0},
    ),
    "records not queued never call back": (
        3,
        [("ack", 0, None, 0, 1), ("seal", 2)],
        {"seal": [True], "done": [], "acks": [(None, 0, 1), None, None], "failed": 0, "left": 0},
    ),
    "an error is stored and counted": (
        2,
        [("seal", 0), ("ack", 1, ERR, 4, -1001), ("ack", 0, None, 4, 9)],
        {"seal": [False], "done": 1, "acks": [(None, 4, 9), (ERR, 4, -1001)], "failed": 1, "left": 0},
    ),
    "None partition and offset stay None": (
        1,
        [("ack", 0, ERR, None, None), ("seal", 0)],
        {"seal": [True], "done": [], "acks": [(ERR, None, None)], "failed": 1, "left": 0},
    ),
    "acknowledged at an unknown offset (a retried write the broker had): None, not 0": (
        1,
        [("ack", 0, None, 2, None), ("seal", 0)],
        {"seal": [True], "done": [], "acks": [(None, 2, None)], "failed": 0, "left": 0},
    ),
    "offsets of every size": (
        3,
        [("ack", 0, None, 0, 0), ("ack", 1, None, 2**31 - 1, 2**63 - 1), ("ack", 2, None, 11, 10**12), ("seal", 0)],
        {
            "seal": [True],
            "done": [],
            "acks": [(None, 0, 0), (None, 2**31 - 1, 2**63 - 1), (None, 11, 10**12)],
            "failed": 0,
            "left": 0,
        },
    ),
    "nothing queued at all": (
        4,
        [("seal", 4)],
        {"seal": [True], "done": [], "acks": [None] * 4, "failed": 0, "left": 0},
    ),
    "still open: no settling before every record is in": (
        3,
        [("ack", 0, None, 0, 1), ("ack", 1, None, 0, 2)],
        {"seal": [], "done": [], "acks": [(None, 0, 1), (None, 0, 2), None], "failed": 0, "left": 1},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_steps(impl: Any, case: str) -> None:
    n, steps, want = CASES[case]
    done: list[Any] = []
    fut = object()
    pending = impl.Pending(fut, n, done)
    callbacks = {m["callback"] for m in pending.batch(items(n), 0, n)}
    assert len(callbacks) == n
    by_index = [pending.callback(i) for i in range(n)]
    sealed, taken = [], []
    for step in steps:
        if step[0] == "ack":
            _, i, err, partition, offset = step
            by_index[i](err, Msg(partition, offset))
        elif step[0] == "seal":
            sealed.append(pending.seal(step[1]))
        else:
            out = impl.take(done)
            assert all(p is pending for p in out) and done == []
            taken.append(len(out))
    assert sealed == want["seal"]
    if "taken" in want:
        assert taken == want["taken"]
    if isinstance(want.get("done"), int):
        assert done == [pending] * want["done"]
    elif "done" in want:
        assert done == want["done"]
    assert list(pending.acks) == want["acks"]
    assert (pending.failed, pending.left, pending.fut) == (want["failed"], want["left"], fut)
    written = want["failed"] == 0 and None not in want["acks"]
    results = [{"partition": a[1], "offset": a[2]} for a in want["acks"]] if written else None
    assert pending.placed() == (None if results is None else orjson.dumps(results))


def test_batch_carries_value_key_and_a_callback_per_record(impl: Any) -> None:
    recs = items(5)
    pending = impl.Pending(None, 5, [])
    run = pending.batch(recs, 1, 4)
    assert [(m["value"], m["key"]) for m in run] == [(r.value, r.key) for r, _, _ in recs[1:4]]
    assert [sorted(m) for m in run] == [["callback", "key", "value"]] * 3
    run[2]["callback"](None, Msg(2, 40))  # the callback of items[3]
    assert pending.acks[3] == (None, 2, 40)
    assert pending.batch(recs, 2, 2) == []


@pytest.mark.parametrize("bad", [(-1, 2), (3, 2), (0, 6)])
def test_batch_refuses_a_range_outside_the_request(impl: Any, bad: tuple[int, int]) -> None:
    pending = impl.Pending(None, 5, [])
    with pytest.raises(IndexError, match="of a request of 5"):
        pending.batch(items(6), *bad)


@pytest.mark.parametrize("i", [-1, 5])
def test_callback_refuses_an_index_outside_the_request(impl: Any, i: int) -> None:
    with pytest.raises(IndexError, match="of a request of 5"):
        impl.Pending(None, 5, []).callback(i)


def test_placed_is_none_for_an_error_stored_without_a_callback(impl: Any) -> None:
    """The producer stores a record refused for good as ``(err, None, None)`` itself (librdkafka
    never calls it back), so ``failed`` does not count it: ``placed`` looks at every entry."""
    pending = impl.Pending(None, 2, [])
    pending.callback(0)(None, Msg(0, 5))
    pending.acks[1] = (ERR, None, None)
    pending.seal(1)
    assert pending.failed == 0 and pending.placed() is None
    pending.acks[1] = (None, 0, 6)
    assert pending.placed() == b'[{"partition":0,"offset":5},{"partition":0,"offset":6}]'


def test_size_is_the_callers(impl: Any) -> None:
    pending = impl.Pending(None, 1, [])
    pending.size = 1234
    assert pending.size == 1234 and pending.sealed is False
    pending.seal(1)
    assert pending.sealed is True


def test_implementation_follows_ferry_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE", "0")
    assert acks.implementation() == (acks.Pending, acks.take)
    monkeypatch.setenv("FERRY_NATIVE", "1")
    module = required("ferry.gateway._acks")
    assert acks.implementation() == (module.Pending, module.take)
