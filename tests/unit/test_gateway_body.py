"""gateway/_body.h (records.read_plain) against the long way, records.loads + parse_request: a body
it takes gives the same records; it takes the common bodies and leaves every doubtful one."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from ferry.gateway import records as rq
from tests.support.native import required

TOPIC = "orders"


def long_way(raw: bytes) -> Any:
    """What the gateway makes of body ``raw`` without the C reader: records, or the error."""
    try:
        return rq.parse_request(rq.loads(raw), TOPIC, 1_000)
    except Exception as exc:  # compared by type and text
        return (type(exc), str(exc))


def read(raw: bytes) -> Any:
    required("ferry.gateway._plain")
    return rq.read_plain(raw, TOPIC)


def agrees(raw: bytes) -> bool:
    """Whether the C reader took ``raw`` (it must then agree with the long way)."""
    got = read(raw)
    if got is not None:
        assert got == long_way(raw), raw
    return got is not None


def body(*records: Any) -> bytes:
    return orjson.dumps({"records": list(records)})


TAKEN = {
    "plain": body({"key": "k1", "value": {"n": 1, "pad": "x" * 80}}),
    "no key, no value, nulls": body({}, {"key": None}, {"value": None}, {"key": None, "value": None}),
    "value first": b'{"records":[{"value":1,"key":"k"}]}',
    "strings": body({"key": "ü€𝄞", "value": "ü€𝄞 bare text"}, {"key": "", "value": ""}),
    "escapes in a key and a string value": b'{"records":[{"key":"a\\"b\\\\c\\/d","value":"l1\\nl2\\tx\\r\\b\\f\\/"}]}',
    "escapes in a JSON value": b'{"records":[{"value":{"q":"say \\"hi\\"\\n","b":"\\\\"}}]}',
    "numbers": body({"value": [0, -1, 17, 123456789012345678, -123456789012345678, 1.5, -0.25, 0.0, -0.0, 1e15]}),
    "decimals in repr's range": b'{"records":[{"value":[0.1,100.0,123456789012345.6,0.0001,2.5]}]}',
    "literals and nesting": body({"value": {"a": [True, False, None, {"b": [[[]]], "c": {}}]}}),
    "whitespace everywhere": (
        b' \n{ "records" :\t[ { "key" : "k" , "value" : { "a" : [ 1 , 2 ] , "s" : "x y" } } ,\r\n {} ] } \n'
    ),
    "json.dumps' spaces": json.dumps({"records": [{"key": "k", "value": {"n": 1, "pad": "x"}}]}).encode(),
    "raw control-free unicode": body({"value": {"\u2028": "\u007f\ufffe", "é": "𝄞"}}),
    "64 levels": body({"value": json.loads("[" * 64 + "]" * 64)}),
    "32 members": body({"value": {f"m{i}": i for i in range(32)}}),
    "many records": body(*({"key": f"k{i}", "value": i} for i in range(1000))),
}


@pytest.mark.parametrize("raw", TAKEN.values(), ids=TAKEN.keys())
def test_it_takes_the_common_bodies_and_makes_the_same_records(raw: bytes) -> None:
    assert agrees(raw)


LEFT = {
    # not plain records: the long way makes or refuses them, naming their fields
    "headers": body({"value": 1, "headers": {"h": "v"}}),
    "partition": body({"value": 1, "partition": 0}),
    "delay": body({"value": 1, "delay_ms": 5}),
    "value_b64": body({"value_b64": "aGk="}),
    "another field": body({"key": "k", "other": 1}),
    "key not a string": body({"key": 5}),
    "a record not an object": body(7),
    "key twice": b'{"records":[{"key":"a","key":"b"}]}',
    "value twice": b'{"records":[{"value":1,"value":2}]}',
    "an escaped field name": b'{"records":[{"k\\u0065y":"a"}]}',
    # the body's shape
    "empty list": b'{"records":[]}',
    "not an object": b"[]",
    "another top field": b'{"records":[{}],"x":1}',
    "records twice": b'{"records":[{}],"records":[{}]}',
    "a byte order mark": b'\xef\xbb\xbf{"records":[{}]}',
    "trailing text": b'{"records":[{}]} x',
    "trailing comma": b'{"records":[{},]}',
    "10,001 records": body(*({} for _ in range(rq.MAX_RECORDS + 1))),
    "cut short": b'{"records":[{"value":"abc',
    "empty": b"",
    # values orjson would write otherwise
    "a \\u escape": b'{"records":[{"value":"\\u00e9"}]}',
    "a \\/ in a JSON value": b'{"records":[{"value":["a\\/b"]}]}',
    "a name twice in a value": b'{"records":[{"value":{"a":1,"a":2}}]}',
    "-0": b'{"records":[{"value":-0}]}',
    "19 digits": b'{"records":[{"value":1234567890123456789}]}',
    "an exponent": b'{"records":[{"value":1e3}]}',
    "a trailing zero": b'{"records":[{"value":1.50}]}',
    "beyond repr's decimals": b'{"records":[{"value":0.00001}]}',
    "17 significant digits": b'{"records":[{"value":0.10000000000000001}]}',
    "65 levels": body({"value": json.loads("[" * 65 + "]" * 65)}),
    "33 members": body({"value": {f"m{i}": i for i in range(33)}}),
    # not JSON
    "a raw tab in a string": b'{"records":[{"value":"a\tb"}]}',
    "invalid UTF-8": b'{"records":[{"value":"\xff"}]}',
    "a surrogate in UTF-8": b'{"records":[{"value":"\xed\xa0\x80"}]}',
    "an overlong form": b'{"records":[{"value":"\xc0\xaf"}]}',
    "a leading zero": b'{"records":[{"value":01}]}',
    "a bare minus": b'{"records":[{"value":-}]}',
    "a dot without digits": b'{"records":[{"value":1.}]}',
    "a literal cut short": b'{"records":[{"value":tru}]}',
    "a literal run on": b'{"records":[{"value":nullx}]}',
    "a missing colon": b'{"records":[{"value" 1}]}',
    "single quotes": b"{'records':[{}]}",
    "NaN": b'{"records":[{"value":NaN}]}',
}


@pytest.mark.parametrize("raw", LEFT.values(), ids=LEFT.keys())
def test_it_leaves_every_other_body_to_the_long_way(raw: bytes) -> None:
    assert read(raw) is None


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, 1, -1, 7, 2**53, -(2**62), 10**17, 10**18, 2**63 - 1, 2**64 - 1])
    if kind == 2:  # doubles of every size; the reader takes some and leaves the others
        return rng.choice([rng.random(), rng.uniform(-1e6, 1e6), rng.uniform(-1e17, 1e17), rng.random() * 1e-6])
    if kind in (3, 4, 5):
        return _random_string(rng)
    if kind == 6 or kind == 7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_random_string(rng) if rng.random() < 0.8 else "k": _random_value(rng, depth + 1) for _ in range(3)}


def _random_string(rng: random.Random) -> str:
    alphabet = 'abc xyz"\\/\n\t\r\b\f\x00\x1féü€𝄞\u2028\x7f0123456789'
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))


def _random_record(rng: random.Random) -> Any:
    rec: dict[str, Any] = {}
    if rng.random() < 0.7:
        rec["key"] = rng.choice([None, "k", "ключ", 'a"b', "x\\/y"])
    if rng.random() < 0.9:
        rec["value"] = _random_value(rng)
    if rng.random() < 0.05:
        rec[rng.choice(["headers", "partition", "other"])] = {}
    return rec


def _spelled(rng: random.Random, doc: Any) -> bytes:
    """``doc`` as JSON text: orjson's, the stdlib's (with spaces, \\u escapes or not) or indented."""
    how = rng.randrange(4)
    if how == 0:
        return orjson.dumps(doc)
    if how == 1:
        return json.dumps(doc).encode()
    if how == 2:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    return json.dumps(doc, ensure_ascii=False, indent=1).encode()


def test_it_agrees_with_the_long_way_on_random_bodies() -> None:
    rng = random.Random(23)
    taken = 0
    for _ in range(3000):
        doc = {"records": [_random_record(rng) for _ in range(rng.randrange(1, 6))]}
        raw = _spelled(rng, doc)
        if rng.random() < 0.2:  # and broken: a byte changed, dropped or doubled
            i = rng.randrange(len(raw))
            raw = raw[:i] + rng.choice([b"", bytes([rng.randrange(256)]), raw[i : i + 1] * 2]) + raw[i + 1 :]
        taken += agrees(raw)
    assert taken > 500  # and it is not one that takes nothing


def test_it_takes_decimals_as_orjson_writes_them_and_agrees_on_every_other_spelling() -> None:
    rng = random.Random(5)
    for _ in range(20000):
        x = rng.choice([rng.random(), rng.uniform(-1e16, 1e16), rng.random() * 10 ** rng.randrange(-6, 18)])
        spellings = [orjson.dumps(x).decode(), repr(x), f"{x:.3f}", f"{x:.17g}", f"{x:.1e}"]
        taken = [agrees(b'{"records":[{"value":[' + text.encode() + b"]}]}") for text in spellings]
        # orjson's own spelling is taken where Python's repr has no exponent either
        assert taken[0] == (x == 0 or 1e-4 <= abs(x) < 1e16), spellings[0]
