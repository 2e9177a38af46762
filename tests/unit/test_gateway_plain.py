"""gateway/_plain.c against parse_request's Python branch: the same records, refusals and errors
for every body (the reference is the Python one)."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from ferry.gateway import records as rq
from ferry.gateway.records import Outgoing, Refused
from tests.support.native import required

DEEP = "[" * 300 + "]" * 300  # orjson reads it, and does not write it (255 levels at most)


def both(body: Any, monkeypatch: pytest.MonkeyPatch, topic: str = "t") -> tuple[Any, Any]:
    """(C, Python) results of parse_request, each a list or the exception it raised."""
    required("ferry.gateway._plain")
    assert rq._plain is not None

    def run() -> Any:
        try:
            return rq.parse_request(body, topic, 1_000)
        except Exception as exc:  # compared by type and text
            return (type(exc), str(exc))

    c = run()
    with monkeypatch.context() as m:
        m.setattr(rq, "_plain", None)
        py = run()
    return c, py


@pytest.mark.parametrize(
    "records",
    [
        [{"key": "k", "value": {"n": 1, "pad": "x" * 80}}],
        [{"value": "bare text"}, {"key": "ü€𝄞", "value": "ü€𝄞"}, {}],
        [{"key": None, "value": None}, {"key": "", "value": ""}, {"value": 0}, {"value": [1, 2.5, True, None]}],
        [{"key": 5}, {"key": ["k"]}, {"value": 1, "headers": {"h": "v"}}, {"value": 1, "partition": 2}],
        [{"value": 1, "delay_ms": 5}, {"Key": "k"}, {"key": "k", "value": 1, "other": 2}, "text", 7, None, []],
        [{"value_b64": "aGk="}, {"value": 1, "value_b64": "aGk="}, {"value_b64": "not base64!"}],
        [{"key": "k", "value": json.loads(DEEP)}, {"value": "after the deep one"}],
        [{1: "not a string key"}, {"key": "k", 2: "x"}],
        [{"value": orjson.Fragment(b"123456789012345678901234567890")}],
    ],
    ids=["plain", "strings", "nulls", "not-plain", "others", "b64", "too-deep", "int-keys", "fragment"],
)
def test_the_c_twin_makes_what_python_makes(records: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    c, py = both({"records": records}, monkeypatch)
    assert c == py
    assert isinstance(c, list) and len(c) == len(records)


def test_a_deep_value_is_refused_on_its_own_with_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    c, py = both({"records": [{"value": json.loads(DEEP)}, {"value": 1}]}, monkeypatch)
    assert c == py
    assert isinstance(c[0], Refused) and c[0].field == "records[0].value" and "255 levels" in c[0].error
    assert c[1] == Outgoing("t", None, b"1", [])


def test_a_made_record_is_an_ordinary_outgoing(monkeypatch: pytest.MonkeyPatch) -> None:
    c, _ = both({"records": [{"key": "k", "value": {"a": 1}}]}, monkeypatch, topic="orders")
    rec = c[0]
    assert type(rec) is Outgoing and rec.size == 1 + 7 + 64
    rec.headers.append(("h", b"v"))  # each record its own headers list
    again, _ = both({"records": [{"key": "k"}, {"key": "k"}]}, monkeypatch)
    again[0].headers.append(("h", b"v"))
    assert again[1].headers == []


def test_random_bodies_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(7)
    scalars: list[Any] = [None, "", "s", "ü", 0, -1, 2**63, 1.5, True, False, [], {}, {"a": [1]}]
    names = ["key", "value", "headers", "partition", "value_b64", "delay_ms", "x"]
    for _ in range(300):
        recs: list[Any] = []
        for _ in range(rnd.randrange(1, 12)):
            if rnd.random() < 0.1:
                recs.append(rnd.choice(scalars))
                continue
            recs.append({rnd.choice(names): rnd.choice(scalars) for _ in range(rnd.randrange(0, 4))})
        c, py = both({"records": recs}, monkeypatch)
        assert c == py, recs


def test_setup_refuses_an_outgoing_it_cannot_fill() -> None:
    c = required("ferry.gateway._plain")
    fields = ("topic", "key", "value", "headers", "partition", "due_ms")
    with pytest.raises(ValueError, match="field 5 must be due_ms"):
        c.setup(Outgoing, (*fields[:5], "later"), orjson.dumps, orjson.JSONEncodeError)
    with pytest.raises(ValueError, match="must have the fields"):
        c.setup(Outgoing, fields[:5], orjson.dumps, orjson.JSONEncodeError)

    class NoSlots:
        topic = key = value = headers = partition = due_ms = None

    with pytest.raises(ValueError, match="must be a slot"):
        c.setup(NoSlots, fields, orjson.dumps, orjson.JSONEncodeError)
    c.setup(Outgoing, fields, orjson.dumps, orjson.JSONEncodeError)  # as records.py left it


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"1" * 18,
        b"1" * 19,
        b"x" + b"9" * 19 + b"x",
        b'{"v": 123456789012345678}',  # 18
        b'{"v": 1234567890123456789}',  # 19
        b'{"v": 123456789.0123456789}',  # split by the point
        b'{"v": "' + "٠١٢٣٤٥٦٧٨٩".encode() * 3 + b'"}',  # digits, not ASCII ones
        bytes(range(256)) * 3,
        b"0" * 18 + b"/" + b"0" * 18 + b":" + b"0" * 19,
    ],
)
def test_the_digit_run_check_agrees(raw: bytes) -> None:
    c = required("ferry.gateway._plain")
    assert c.digit_run(raw, 19) == (rq._LONG_DIGITS in raw.translate(rq._DIGITS_AS_ZERO))


def test_random_digit_runs_agree() -> None:
    c = required("ferry.gateway._plain")
    rnd = random.Random(11)
    for _ in range(2000):
        raw = bytes(rnd.choice(b"0123456789/:a ") for _ in range(rnd.randrange(0, 60)))
        assert c.digit_run(raw, 19) == (rq._LONG_DIGITS in raw.translate(rq._DIGITS_AS_ZERO)), raw
    with pytest.raises(ValueError):
        c.digit_run(b"1", 0)


def _send_items_both(records: list[Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    required("ferry.gateway._plain")
    c = rq.send_items(records)
    with monkeypatch.context() as m:
        m.setattr(rq, "_send_items", None)
        py = rq.send_items(records)
    return c, py


SEND_ITEMS = {
    "plain": [Outgoing("t", b"k", b"v", []), Outgoing("u", None, None, []), Outgoing("t", b"", b"x" * 300, [])],
    "empty": [],
    "refused": [Outgoing("t", b"k", b"v", []), Refused("records[1].key", "must be a string")],
    "headers": [Outgoing("t", b"k", b"v", [("h", b"1")])],
    "partition": [Outgoing("t", b"k", b"v", [], partition=0)],
    "delayed": [Outgoing("t", b"k", b"v", [], due_ms=5)],
    "not a record": [Outgoing("t", b"k", b"v", []), "text"],
}


@pytest.mark.parametrize("records", SEND_ITEMS.values(), ids=SEND_ITEMS.keys())
def test_send_items_in_c_is_the_python_reference(records: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    c, py = _send_items_both(records, monkeypatch)
    assert c == py
    plain = all(type(r) is Outgoing and not r.headers and r.partition is None and r.due_ms is None for r in records)
    assert (c is not None) == plain
    if c is not None:
        assert c == [(r, r.topic, r.size) for r in records]
