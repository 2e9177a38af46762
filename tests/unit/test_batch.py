"""Batch push mode, pure parts: batches from the window, the CloudEvents batch body, answers → outcomes."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

import ferry.worker.batch as batch_module
from ferry.subscription import RetryPolicySpec
from ferry.worker.batch import (
    EventEncoder,
    Verdict,
    distinct_id_runs,
    encode_batch,
    event_id,
    interpret,
    is_json,
    settle,
)
from ferry.worker.push import Record
from ferry.worker.retry import RetryPolicy
from ferry.worker.window import Window
from tests.support.native import required


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    size: int = 10


def recs(*keys: str | None) -> list[Rec]:
    return [Rec(i, None if k is None else k.encode()) for i, k in enumerate(keys)]


def offsets(items: list[Rec]) -> list[int]:
    return [r.offset for r in items]


def size(r: Rec) -> int:
    return r.size


# --- batches from the window ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ordering", "keys", "max_records", "max_in_flight", "first", "second"),
    [
        # key: a lane gives all it has; the batch is in offset order; the next batch cannot take a busy key.
        ("key", ["a", "b", "a", "c", "a"], 10, 100, [0, 1, 2, 3, 4], []),
        ("key", ["a", "b", "a", "c", "a"], 2, 100, [0, 2], [1, 3]),
        ("key", ["a", "b", "a", "b"], 10, 100, [0, 1, 2, 3], []),  # two lanes' runs, interleaved
        # a partly taken lane waits (its rest comes after these finish); the next lane starts a batch.
        ("key", ["a", "a", "a", "b"], 2, 100, [0, 1], [3]),
        # partition: one lane, so one batch in flight per partition.
        ("partition", ["a", "b", "c"], 2, 100, [0, 1], []),
        # none: no order; batches fill from the waiting records in offset order.
        ("none", ["a", "a", "a", "a", "a"], 2, 100, [0, 1], [2, 3]),
        # max_in_flight bounds un-acknowledged records across batches.
        ("none", ["a", "a", "a", "a", "a"], 3, 4, [0, 1, 2], [3]),
        # null keys are their own lanes.
        ("key", [None, None, "a"], 10, 100, [0, 1, 2], []),
    ],
)
@pytest.mark.parametrize("bulk", [False, True], ids=["one-by-one", "bulk"])
def test_take_batch(
    ordering: str,
    keys: list[str | None],
    max_records: int,
    max_in_flight: int,
    first: list[int],
    second: list[int],
    bulk: bool,
) -> None:
    """``bulk``: records added with add_many and taken with the raw-size bound (the worker's path)."""
    w: Window[Rec] = Window(ordering, max_in_flight)
    raw = size if bulk else None
    if bulk:
        w.add_many(recs(*keys))
    else:
        for r in recs(*keys):
            w.add(r)
    assert offsets(w.take_batch(max_records, 10_000, size, raw)) == first
    assert offsets(w.take_batch(max_records, 10_000, size, raw)) == second
    assert w.in_flight == len(first) + len(second)
    assert w.pending == len(keys) - w.in_flight


def test_take_batch_by_bytes_and_oversized_record_alone() -> None:
    w: Window[Rec] = Window("none", 100)
    for r in [Rec(0, None, 40), Rec(1, None, 40), Rec(2, None, 500), Rec(3, None, 10)]:
        w.add(r)
    assert offsets(w.take_batch(100, 100, size)) == [0, 1]
    assert offsets(w.take_batch(100, 100, size)) == [2]  # larger than max_bytes: alone
    assert offsets(w.take_batch(100, 100, size)) == [3]


def test_raw_size_bound_falls_back_to_exact_sizes_near_max_bytes() -> None:
    """The cheap bound (3 x raw + 128) would refuse the second lane; exact sizes admit it."""
    w: Window[Rec] = Window("key", 100)
    w.add_many([Rec(0, b"a", 40), Rec(1, b"b", 40), Rec(2, b"c", 30)])
    assert offsets(w.take_batch(100, 110, size, size)) == [0, 1, 2]
    w2: Window[Rec] = Window("key", 100)
    w2.add_many([Rec(0, b"a", 40), Rec(1, b"b", 40), Rec(2, b"c", 31)])
    assert offsets(w2.take_batch(100, 110, size, size)) == [0, 1]


@pytest.mark.parametrize("seed", range(5))
def test_bulk_paths_agree_with_one_by_one(seed: int) -> None:
    """add_many / take_batch with the bound / finish_offsets give the batches add / take_batch /
    finish give, over random keys, limits and acknowledgement orders."""
    rng = random.Random(seed)
    ordering = rng.choice(["key", "partition", "none"])
    items = [Rec(i, rng.choice([b"a", b"b", b"c", b"d", None]), rng.randrange(1, 60)) for i in range(300)]
    one: Window[Rec] = Window(ordering, 40)
    many: Window[Rec] = Window(ordering, 40)
    fed = 0
    in_flight: list[list[Rec]] = []
    while fed < len(items) or one.in_flight:
        chunk = items[fed : fed + rng.randrange(1, 30)]
        fed += len(chunk)
        for r in chunk:
            one.add(r)
        many.add_many(chunk)
        while True:
            a = one.take_batch(8, 300, size)
            b = many.take_batch(8, 300, size, size)
            assert a == b
            if not a:
                break
            in_flight.append(a)
        rng.shuffle(in_flight)
        done = rng.randrange(0, len(in_flight) + 1)
        for batch in in_flight[:done]:
            for r in batch:
                one.finish(r)
            many.finish_offsets([r.offset for r in batch])
        in_flight = in_flight[done:]
        assert (one.in_flight, one.pending) == (many.in_flight, many.pending)


def test_lane_stays_busy_until_its_whole_batch_finished() -> None:
    w: Window[Rec] = Window("key", 100)
    items = recs("a", "a", "b")
    for r in items:
        w.add(r)
    assert offsets(w.take_batch(10, 10_000, size)) == [0, 1, 2]
    w.add(Rec(3, b"a"))
    assert w.take_batch(10, 10_000, size) == []
    w.finish(items[0])
    assert w.take_batch(10, 10_000, size) == []  # offset 1 of key a still in flight
    w.finish(items[1])
    assert offsets(w.take_batch(10, 10_000, size)) == [3]


def test_partly_taken_lane_resumes_after_finish() -> None:
    w: Window[Rec] = Window("key", 100)
    items = recs("a", "a", "a")
    for r in items:
        w.add(r)
    assert offsets(w.take_batch(2, 10_000, size)) == [0, 1]
    assert w.take_batch(2, 10_000, size) == []
    w.finish(items[0])
    w.finish(items[1])
    assert offsets(w.take_batch(2, 10_000, size)) == [2]


# --- the body ---------------------------------------------------------------------------------

Encode = Callable[[EventEncoder, Sequence[Record], Sequence[int]], bytes]


@pytest.fixture(params=["python", "c"])
def encode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Encode:
    """encode_batch on either path: the Python loop, or its C twin (worker/_encode.c; the C run
    fails when the module was not built, skips under FERRY_NATIVE=0)."""
    if request.param == "python":
        monkeypatch.setattr(batch_module, "_native", None)
        return encode_batch
    module = required("ferry.worker._encode")
    monkeypatch.setattr(batch_module, "_native", module)

    def c_path(encoder: EventEncoder, records: Sequence[Record], attempts: Sequence[int]) -> bytes:
        body: Any = module.encode_batch(encoder, records, attempts, batch_module._JSON_MAX_DEPTH)
        assert isinstance(body, bytes), "the C path left this batch to Python"
        assert body == encode_batch(encoder, records, attempts)  # the wired-in function gives it too
        return body

    return c_path


def one_event(encode: Encode, encoder: EventEncoder, record: Record, attempt: int) -> Any:
    events = json.loads(encode(encoder, [record], [attempt]))
    assert len(events) == 1
    return events[0]


def rec(offset: int = 7, key: bytes | None = b"k/1", value: bytes | None = b'{"a": [1, 2]}', **kw: Any) -> Record:
    headers = kw.pop("headers", [("content-type", b"application/json")])
    return Record("orders", 3, offset, key, value, headers, kw.pop("ts", 1763800000123))


@pytest.mark.parametrize(
    ("value", "content_type", "data"),
    [
        (b'{"a": [1, 2]}', b"application/json", {"a": [1, 2]}),
        (b'"text"', b"application/cloudevents+json; charset=utf-8", "text"),
        (b"[1,2]", b"text/json", [1, 2]),
        (b"{not json", b"application/json", None),  # does not parse: base64
        (b"NaN", b"application/json", None),  # not strict JSON
        (b'{"a":1}', b"text/plain", None),  # not a JSON content type
        (b'{"a":1}', None, None),  # no content type: application/octet-stream
        (b"\xff\xfe{}", b"application/json", None),  # not UTF-8
        (b"", b"application/json", None),
    ],
)
def test_data_is_json_when_it_is_else_base64_byte_for_byte(
    encode: Encode, value: bytes, content_type: bytes | None, data: Any
) -> None:
    headers = [("content-type", content_type)] if content_type is not None else []
    event = one_event(encode, EventEncoder("c", "s"), rec(value=value, headers=headers), 1)
    if data is not None:
        assert event["data"] == data
        assert "data_base64" not in event
    else:
        assert base64.b64decode(event["data_base64"]) == value
        assert "data" not in event
    assert event["datacontenttype"] == (content_type.decode() if content_type else "application/octet-stream")


def test_event_attributes(encode: Encode) -> None:
    headers = [
        ("content-type", b"application/json"),
        ("TraceParent", b"00-abc"),
        ("x-request-id", b"r1"),
        ("id", b"not the id"),
        ("bin", b"\x00\xff"),
        ("gone", None),
    ]
    event = one_event(encode, EventEncoder("prod", "orders-to-billing"), rec(headers=headers), 4)
    assert event == {
        "specversion": "1.0",
        "id": "orders/3/7",
        "source": "/ferry/prod/orders-to-billing",
        "type": "dev.ferry.kafka.record",
        "time": "2025-11-22T08:26:40.123Z",
        "datacontenttype": "application/json",
        "kafkatopic": "orders",
        "kafkapartition": 3,
        "kafkaoffset": 7,
        "partitionkey": "k%2F1",
        "ferryattempt": 4,
        "traceparent": "00-abc",
        "bin": "%00%FF",
        "ferryheaders": "x-request-id=r1&id=not%20the%20id",
        "data": {"a": [1, 2]},
    }


def test_null_key_and_null_value(encode: Encode) -> None:
    event = one_event(encode, EventEncoder("c", "s"), rec(key=None, value=None, headers=[]), 1)
    assert "partitionkey" not in event
    assert "data" not in event and "data_base64" not in event


def test_batch_is_an_array_in_record_order_with_attempts(encode: Encode) -> None:
    body = encode(EventEncoder("c", "s"), [rec(1), rec(2), rec(3)], [1, 2, 1])
    events = json.loads(body)
    assert [e["kafkaoffset"] for e in events] == [1, 2, 3]
    assert [e["ferryattempt"] for e in events] == [1, 2, 1]
    assert event_id(rec(9)) == "orders/3/9"


@pytest.mark.parametrize("path", ["orjson", "c"])
def test_is_json(path: str) -> None:
    check = is_json if path == "orjson" else required("ferry.worker._encode").is_json
    assert check(b" {} ") and check(b"1") and not check(b"Infinity") and not check(b"{}x")


# --- answers ----------------------------------------------------------------------------------

IDS = ["t/0/1", "t/0/2", "t/0/3"]


def results(*entries: Any) -> bytes:
    return json.dumps({"results": list(entries)}).encode()


@pytest.mark.parametrize(
    ("status", "body", "truncated", "kind", "statuses"),
    [
        (200, b"", False, "statuses", (200, 200, 200)),
        (204, b"ok", False, "statuses", (204, 204, 204)),
        (200, b'{"accepted": 3}', False, "statuses", (200, 200, 200)),  # no results: all acked
        (200, b"{broken", False, "statuses", (200, 200, 200)),  # not JSON: irrelevant body
        (200, b'{"results": [{"id": "t/0/1", "st', False, "malformed", ()),  # cut results
        (200, b"{" + b" " * 10, True, "malformed", ()),  # cut off: cannot be trusted
        (
            207,
            results({"id": "t/0/3", "status": 200}, {"id": "t/0/1", "status": 500}, {"id": "t/0/2", "status": 400}),
            False,
            "statuses",
            (500, 400, 200),
        ),
        (200, results({"id": "t/0/1", "status": 200}), False, "malformed", ()),  # too few
        (
            200,
            results({"id": "t/0/1", "status": 200}, {"id": "t/0/1", "status": 200}, {"id": "t/0/3", "status": 200}),
            False,
            "malformed",
            (),
        ),  # repeated id
        (
            200,
            results({"id": "x", "status": 200}, {"id": "t/0/2", "status": 200}, {"id": "t/0/3", "status": 200}),
            False,
            "malformed",
            (),
        ),  # unknown id
        (
            200,
            results({"id": "t/0/1", "status": "200"}, {"id": "t/0/2", "status": 200}, {"id": "t/0/3", "status": 2}),
            False,
            "malformed",
            (),
        ),
        (200, b'{"results": {"t/0/1": 200}}', False, "malformed", ()),
        (413, b"", False, "split", (413, 413, 413)),
        (400, b"", False, "split", (400, 400, 400)),
        (404, b"", False, "split", (404, 404, 404)),
        (429, b"", False, "statuses", (429, 429, 429)),
        (408, b"", False, "statuses", (408, 408, 408)),
        (503, b"", False, "statuses", (503, 503, 503)),
        (None, b"", False, "statuses", (None, None, None)),
    ],
)
def test_interpret(
    status: int | None, body: bytes, truncated: bool, kind: str, statuses: tuple[int | None, ...]
) -> None:
    verdict = interpret(status, body, truncated, IDS, "timeout" if status is None else None)
    assert verdict.kind == kind
    assert verdict.statuses == statuses


def test_single_record_4xx_is_not_split() -> None:
    assert interpret(413, b"", False, IDS[:1]) == Verdict("statuses", (413,), ("",))


def test_results_error_text_reaches_the_reason() -> None:
    body = results(
        {"id": "t/0/1", "status": 422, "error": "bad schema"},
        {"id": "t/0/2", "status": 200},
        {"id": "t/0/3", "status": 200},
    )
    decisions = settle(interpret(200, body, False, IDS), ["a", "b", "c"], [1, 1, 1], policy())
    assert decisions[0].action == "dead_letter"
    assert decisions[0].reason == "endpoint answered 422 (bad schema)"


def policy(max_attempts: int = 3) -> RetryPolicy:
    return RetryPolicy(RetryPolicySpec(max_attempts, 100, 1000), random.Random(1))


def actions(verdict: Verdict, lanes: list[str], charged: list[int], max_attempts: int = 3) -> list[str]:
    return [d.action for d in settle(verdict, lanes, charged, policy(max_attempts))]


def st(*statuses: int | None) -> Verdict:
    return Verdict("statuses", statuses, ("",) * len(statuses))


@pytest.mark.parametrize(
    ("verdict", "lanes", "charged", "expected"),
    [
        (st(200, 200, 200), ["a", "a", "b"], [1, 1, 1], ["ack", "ack", "ack"]),
        # a retried record holds back the later records of its lane, whatever their own answer
        (st(500, 200, 200), ["a", "a", "b"], [1, 1, 1], ["retry", "held", "ack"]),
        (st(200, 503, 400), ["a", "a", "a"], [1, 1, 1], ["ack", "retry", "held"]),
        # a dead-lettered record does not hold its lane back (it is done)
        (st(400, 200, 200), ["a", "a", "b"], [1, 1, 1], ["dead_letter", "ack", "ack"]),
        # retries run out per record
        (st(500, 500, 200), ["a", "b", "c"], [3, 1, 1], ["dead_letter", "retry", "ack"]),
        (st(500, 500), ["a", "a"], [3, 1], ["dead_letter", "retry"]),
        # whole-batch failure: first of each lane retried, the rest held
        (st(None, None, None), ["a", "a", "b"], [1, 1, 1], ["retry", "held", "retry"]),
        (Verdict("malformed", (), ("bad",) * 2), ["a", "b"], [1, 1], ["retry", "retry"]),
        (Verdict("malformed", (), ("bad",) * 2), ["a", "b"], [3, 1], ["dead_letter", "retry"]),
    ],
)
def test_settle(verdict: Verdict, lanes: list[str], charged: list[int], expected: list[str]) -> None:
    assert actions(verdict, lanes, charged) == expected


def test_settle_honours_retry_after_capped() -> None:
    decisions = settle(st(429, 200), ["a", "b"], [1, 1], policy(), retry_after_s=0.5)
    assert decisions[0].action == "retry" and decisions[0].delay_s == 0.5
    decisions = settle(st(503), ["a"], [1], policy(), retry_after_s=3600)
    assert decisions[0].delay_s == 1.0  # capped at retry.max_backoff_ms


def test_time_of_a_record_just_before_the_epoch(encode: Encode) -> None:
    """A timestamp of -1 ms (second -1) is formatted, not taken for the encoder's "no second yet"."""
    event = one_event(encode, EventEncoder("c", "s"), rec(ts=-1), 1)
    assert event["time"] == "1969-12-31T23:59:59.999Z"


@pytest.mark.parametrize(
    ("ids", "runs"),
    [
        ([], [(0, 0)]),
        (["a"], [(0, 1)]),
        (["a", "b", "c"], [(0, 3)]),
        (["a", "a"], [(0, 1), (1, 2)]),
        (["a", "b", "a", "c"], [(0, 2), (2, 4)]),
        (["a", "b", "b", "a"], [(0, 2), (2, 4)]),
        (["a", "a", "a"], [(0, 1), (1, 2), (2, 3)]),
    ],
)
def test_distinct_id_runs(ids: list[str], runs: list[tuple[int, int]]) -> None:
    assert distinct_id_runs(ids) == runs
    for i, j in runs:  # in order, covering every id once, none repeated within a run
        assert len(set(ids[i:j])) == j - i
    assert [k for i, j in runs for k in range(i, j)] == list(range(len(ids)))


def test_a_results_answer_cannot_name_a_repeated_id() -> None:
    # Why a batch must never carry one id twice: a correct answer reads as malformed.
    body = json.dumps({"results": [{"id": "t/0/5", "status": 200}, {"id": "t/0/5", "status": 200}]}).encode()
    assert interpret(200, body, False, ["t/0/5", "t/0/5"]).kind == "malformed"
