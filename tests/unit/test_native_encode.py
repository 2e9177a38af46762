"""The C twin of the batch encoder (worker/_encode.c) against the Python reference (worker/batch.py).

The C path must give the Python path's bytes: the JSON check must give orjson's verdicts, and the
body of any batch must be the same. These tests fail, not skip, when the module was not built
(tests/support/native.py); ``FERRY_NATIVE=0`` skips them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType

import pytest

import ferry.worker.batch as batch
from ferry.worker.batch import EventEncoder, is_json
from ferry.worker.push import Record
from tests.support.native import required


@pytest.fixture
def enc() -> ModuleType:
    return required("ferry.worker._encode")


HALFWAY = str(2**1024 - 2**970).encode()  # halfway between DBL_MAX and 2**1024: rounds to infinity

# (input, orjson.loads accepts it). Each row is checked against orjson too.
JSON_TABLE: list[tuple[bytes, bool]] = [
    # the text around the value
    (b"", False),
    (b" \t\n\r", False),
    (b" \t\n\r1 \t\n\r", True),  # JSON whitespace around the value
    (b"\x0c1", False),  # form feed is not JSON whitespace
    (b"\xef\xbb\xbf{}", False),  # a UTF-8 BOM
    (b"1 2", False),
    (b"{}x", False),
    (b'"a"\x00', False),
    (b"{}", True),
    (b"[]", True),
    (b"true", True),
    (b"false", True),
    (b"null", True),
    (b"tru", False),
    (b"nulll", False),
    (b"NaN", False),
    (b"Infinity", False),
    (b"-Infinity", False),
    (b"'a'", False),
    # structure
    (b'{"a":1,}', False),
    (b"[1,]", False),
    (b"[,1]", False),
    (b"{1:2}", False),
    (b'{"a" 1}', False),
    (b'{"a":1 "b":2}', False),
    (b'{"a":1,"a":2}', True),  # duplicate names are JSON
    (b'{ "a" : [ 1 , { } ] }', True),
    # numbers
    (b"-0", True),
    (b"0", True),
    (b"01", False),
    (b"-01", False),
    (b"00", False),
    (b"+1", False),
    (b".5", False),
    (b"[-.1]", False),
    (b"1.", False),
    (b"1.e5", False),
    (b"-", False),
    (b"-a", False),
    (b"1e", False),
    (b"1e+", False),
    (b"1.5e", False),
    (b"1E+2", True),
    (b"1e-5", True),
    (b"-0.0e-0", True),
    (b"0e0", True),
    (b"1e01", True),
    (b"[1.1.1]", False),
    # numbers a double cannot hold: infinity is an error, underflow to 0 is not
    (b"1e308", True),
    (b"1e309", False),
    (b"1e400", False),
    (b"-1e400", False),
    (b"1.0e-400", True),
    (b"1e-99999999999999999999999", True),
    (b"0e99999999999999999999", True),
    (b"0.0e999", True),
    (b"123456789012345678901234567890", True),  # beyond 64 bits: a float
    (b"1" * 309, True),  # 1.1e308
    (b"2" * 309, False),  # 2.2e308
    (b"1" * 400, False),
    (b"1" * 400 + b"e-100", True),
    (b"0." + b"0" * 400 + b"1e709", True),
    (b"1.7976931348623157e308", True),  # DBL_MAX
    (b"1.7976931348623158e308", True),  # rounds to DBL_MAX
    (HALFWAY, False),  # a tie: rounds to even, infinity
    (str(2**1024 - 2**970 - 1).encode(), True),
    (str(2**1024 - 2**970 - 1).encode() + b"." + b"9" * 800, True),  # below the tie by 10**-800
    (HALFWAY[:1] + b"." + HALFWAY[1:] + b"e308", False),
    (b"-" + HALFWAY, False),
    (b"-1" + b"0" * 308, True),
    (b"-1" + b"0" * 309, False),
    # strings and escapes
    (b'"\\u0000"', True),
    (b'"\\/"', True),
    (b'"\\b\\f\\n\\r\\t\\"\\\\"', True),
    (b'"\\x"', False),
    (b'"\\\'"', False),
    (b'"\\U0041"', False),
    (b'"\\u00e"', False),
    (b'"\\u00eG"', False),
    (b'"\\uFFFF"', True),
    (b'"\x1f"', False),  # control characters must be escaped
    (b'"\t"', False),
    (b"[\x00]", False),
    (b'"\x7f"', True),  # DEL need not be
    (b'"abc', False),
    # lone surrogate escapes are errors; a pair is a character
    (b'"\\ud800"', False),
    (b'"\\udc00"', False),
    (b'"\\ud800x"', False),
    (b'"\\ud800\\u0041"', False),
    (b'"\\ud800\\ud800"', False),
    (b'"\\udc00\\ud800"', False),
    (b'"\\ud800\\', False),
    (b'"\\ud800\\udc0"', False),
    (b'"\\ud800\\udc00"', True),
    (b'"\\uDBFF\\uDFFF"', True),
    (b'{"\\ud800":1}', False),  # in a name too
    # UTF-8
    (b'"\xf0\x9f\x98\x80"', True),
    (b'"\xef\xbf\xbf"', True),  # a noncharacter is still a character
    (b'"\xc2\x80"', True),
    (b'"\xc0\x80"', False),  # overlong
    (b'"\xc1\xbf"', False),
    (b'"\xe0\x9f\xbf"', False),
    (b'"\xf0\x8f\xbf\xbf"', False),
    (b'"\xed\x9f\xbf"', True),
    (b'"\xed\xa0\x80"', False),  # a surrogate encoded in UTF-8
    (b'"\xed\xbf\xbf"', False),
    (b'"\xf4\x8f\xbf\xbf"', True),  # U+10FFFF
    (b'"\xf4\x90\x80\x80"', False),  # above U+10FFFF
    (b'"\xf5\x80\x80\x80"', False),
    (b'"\xe2\x82"', False),  # cut short
    (b'"\xff"', False),
    (b"\xff", False),
    (b"\xc2\xa01", False),  # no-break space is not JSON whitespace
    (b'{"\xff":1}', False),
]


@pytest.mark.parametrize(("data", "verdict"), JSON_TABLE, ids=[repr(d[:24]) for d, _ in JSON_TABLE])
def test_is_json_table(enc: ModuleType, data: bytes, verdict: bool) -> None:
    assert is_json(data) is verdict  # orjson agrees with the table
    assert enc.is_json(data, batch._JSON_MAX_DEPTH) is verdict


def test_nesting_limit_is_orjsons(enc: ModuleType) -> None:
    """orjson 3.9.15+ rejects more than 1024 nested arrays/objects; earlier versions have no limit
    (and crash on deep enough documents, CVE-2024-27454). The limit is probed, the C check takes it."""
    depth = batch._JSON_MAX_DEPTH
    assert depth in (-1, 1024)
    for n in (1, 1023, 1024, 1025, 2000):
        docs = [b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n, b'[{"a":' * (n // 2) + b"[]" + b"}]" * (n // 2)]
        for doc, nesting in zip(docs, [n, n, n // 2 * 2 + 1], strict=True):
            assert enc.is_json(doc, depth) is is_json(doc) is (depth < 0 or nesting <= depth), (nesting, doc[:8])
    assert enc.is_json(b"[" * 10**6 + b"]" * 10**6) is True  # no limit, no recursion: no crash
    assert [enc.is_json(b'[{"a":[]}]', limit) for limit in (0, 1, 2, 3, -1)] == [False, False, False, True, True]
    assert enc.is_json(b"1", 0) is True
    assert enc.is_json(b"[" * 10**6, -1) is False


def test_every_byte_at_every_position_of_a_string(enc: ModuleType) -> None:
    """Strings are scanned 8 bytes at a time: each byte value, at each position of a word, in a
    string and in a name, must get orjson's verdict."""
    for byte in range(256):
        for at in range(18):
            text = b"a" * at + bytes([byte]) + b"b" * 17
            for doc in (b'"' + text + b'"', b'{"' + text + b'":1}', b'"' + text + b'\\u00e9\xc3\xa9"'):
                assert enc.is_json(doc, -1) is is_json(doc), doc


SEEDS = [
    b'{"a": [1, 2.5e-3, -0, true, false, null], "b": {"c": "d\\u00e9\\n"}, "e": ""}',
    b'[{"id":1,"name":"\xc3\xa9t\xc3\xa9","tags":["x","y"]},{"id":2,"v":-12.5E+7}]',
    b'"\\ud83d\\ude00 \xf0\x9f\x98\x80 \\/ \\" \\\\"',
    b"  [ 1 , 2 , [ 3 , [ 4 ] ] ]  ",
    b"12345678901234567890123456789012345678901234567890",
    b'{"x": 1.7976931348623157e308, "y": 4.9e-324}',
    b"0",
    b"true",
    b'{"":{"":{"":[]}}}',
]
PIECES = [
    b'"',
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\ud800\\udc00",
    b"\\u00",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b" ",
    b"\t",
    b"\x00",
    b"\x1f",
    b"\x0c",
    b"-",
    b"+",
    b".",
    b"e",
    b"E",
    b"0",
    b"9",
    b"e308",
    b"e309",
    b"1e400",
    b"999",
    b"NaN",
    b"true",
    b"nul",
    b"\xc3\xa9",
    b"\xc3",
    b"\xe2\x82\xac",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\xaf",
    b"\xff",
    b"\xef\xbb\xbf",
]


def mutate(rng: random.Random, doc: bytes) -> bytes:
    """One to three random edits of a JSON-ish document."""
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(doc) + 1)
        edit = rng.randrange(8)
        if edit == 0 and doc:  # flip a byte
            i = min(at, len(doc) - 1)
            doc = doc[:i] + bytes([rng.randrange(256)]) + doc[i + 1 :]
        elif edit == 1:  # truncate
            doc = doc[:at]
        elif edit == 2 and doc:  # delete a byte
            doc = doc[:at] + doc[at + 1 :]
        elif edit in (3, 4):  # insert a piece
            doc = doc[:at] + rng.choice(PIECES) + doc[at:]
        elif edit == 5:  # nest, around orjson's limit at times (never deep enough to crash older orjson)
            n = rng.choice([1, 2, 5, rng.randrange(1000, 1030)])
            doc = b"[" * n + doc + b"]" * n if rng.random() < 0.5 else b'{"k":' * n + doc + b"}" * n
        elif edit == 6:  # a number near DBL_MAX, or with many digits
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 40)))
            number = rng.choice([f"1.79769313486231{digits}e308", f"{digits}e{rng.randrange(280, 330)}", "9" * 309])
            doc = doc[:at] + number.encode() + doc[at:]
        else:  # splice two documents
            other = rng.choice(SEEDS)
            doc = doc[:at] + other[rng.randrange(len(other) + 1) :]
    return doc


def test_is_json_agrees_with_orjson_on_mutated_documents(enc: ModuleType) -> None:
    rng = random.Random(8)
    depth = batch._JSON_MAX_DEPTH
    accepted = 0
    for _ in range(20_000):
        doc = mutate(rng, rng.choice(SEEDS))
        verdict = is_json(doc)
        accepted += verdict
        assert enc.is_json(doc, depth) is verdict, doc
    assert 1000 < accepted < 19_000  # both verdicts are well exercised


# --- the batch body ----------------------------------------------------------------------------


def python_body(encoder: EventEncoder, records: list[Record], attempts: list[int]) -> bytes:
    return ("[" + ",".join(encoder.events(records, attempts)) + "]").encode()


HEADER_SETS: list[list[tuple[str, bytes | None]]] = [
    [],
    [("content-type", b"application/json")],
    [("Content-Type", b"application/cloudevents+json; charset=utf-8")],
    [("content-type", b"APPLICATION/JSON")],
    [("content-type", b"text/plain")],
    [("content-type", b"application/\xffjson")],
    [("content-type", b"application/json"), ("content-type", b"text/plain")],  # the first one counts
    [("content-type", None), ("content-type", b"text/json")],
    [("content-type", b"application/json"), ("traceparent", b"00-abc"), ("TraceParent", b"00-def")],
    [("x-request-id", b"r1"), ("id", b"not the id"), ("bin", b"\x00\xff"), ("gone", None), ("n\xe4me", b"v")],
    [("content-type", b"application/json"), ("tenant", b"acme"), ("x", b"1"), ("x", b"2")],
]
KEYS: list[bytes | None] = [None, b"", b"k/1", b"\xc3\xa9", b"\xff\xfe", b"a b&c=d"]
VALUES: list[bytes | None] = [
    None,
    b"",
    b'{"a": [1, 2]}',
    b'"text"',
    b" [1, 2.5e3, null] ",
    b"{not json",
    b"NaN",
    b"\xff\xfe{}",
    b'"\xed\xa0\x80"',
    b"1e400",
    b'{"n": "\xc3\xa9\\u00e9"}',
    bytes(range(256)),
    b"x" * 1000,
]


def random_records(rng: random.Random, n: int, tuples: list[tuple[tuple[str, bytes | None], ...]]) -> list[Record]:
    records = []
    ts = rng.choice([1763800000000, 0, -2500])
    for _ in range(n):
        ts += rng.choice([0, 1, 7, 400, 999, 1000, 1001, 5000])
        headers: object = rng.choice(tuples)  # shared tuples (identity) or equal lists (lookup)
        if rng.random() < 0.3:
            headers = list(rng.choice(HEADER_SETS))
        key = rng.choice(KEYS) if rng.random() < 0.3 else f"key-{rng.randrange(20_000)}-é".encode()
        value = rng.choice(VALUES) if rng.random() < 0.8 else mutate(rng, rng.choice(SEEDS))
        offset = rng.choice([0, rng.randrange(10**6), 2**63 - 1, 2**64 + 3])  # past 64 bits: formatted by Python
        topic = rng.choice(["orders", "payments", "ünï/code"])
        record = Record(topic, rng.randrange(3), offset, key, value, headers, rng.choice([ts, ts, ts, -1]))  # type: ignore[arg-type]
        records.append(record)
    return records


class TinyCacheEncoder(EventEncoder):
    _CACHE_MAX = 8  # every cache is cleared often, in the middle of batches


@pytest.mark.parametrize("encoder_class", [EventEncoder, TinyCacheEncoder])
def test_batch_body_is_the_python_body_byte_for_byte(enc: ModuleType, encoder_class: type[EventEncoder]) -> None:
    """Random batches: keys (None, non-ASCII, more than _CACHE_MAX distinct ones), values (JSON,
    not JSON, invalid UTF-8, None, empty), header sets, interleaved topics and partitions, seconds
    crossed and -1 timestamps, attempts 1..5. Two encoders, one per path, see the same batches."""
    rng = random.Random(5)
    tuples = [tuple(h) for h in HEADER_SETS]
    c_encoder, py_encoder = encoder_class("prod", "orders-to-billing"), encoder_class("prod", "orders-to-billing")
    for _ in range(200):
        records = random_records(rng, rng.choice([0, 1, 2, 50, 100]), tuples)
        attempts = [rng.randrange(1, 6) for _ in records]
        body = enc.encode_batch(c_encoder, records, attempts, batch._JSON_MAX_DEPTH)
        assert body == python_body(py_encoder, records, attempts)
    assert len(py_encoder._keys) < 4096 if encoder_class is EventEncoder else len(py_encoder._keys) <= 8


def test_one_encoder_shared_by_both_paths(enc: ModuleType) -> None:
    """The caches each path fills are the other's: a body does not depend on what is cached."""
    rng = random.Random(6)
    tuples = [tuple(h) for h in HEADER_SETS]
    encoder = TinyCacheEncoder("c", "s")
    for _ in range(100):
        records = random_records(rng, 40, tuples)
        attempts = [rng.randrange(1, 6) for _ in records]
        assert enc.encode_batch(encoder, records, attempts, batch._JSON_MAX_DEPTH) == python_body(
            encoder, records, attempts
        )


class _Bytes(bytes):
    pass


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r._replace(value=bytearray(r.value or b"")), "a value that is not bytes"),
        # orjson.loads refuses a bytes subclass: the Python path sends it as data_base64.
        (lambda r: r._replace(value=_Bytes(r.value or b"")), "a value of a bytes subclass"),
        (lambda r: r._replace(timestamp_ms=2**70), "a timestamp beyond 64 bits"),
        (lambda r: r._replace(timestamp_ms=1.5), "a timestamp that is not an int"),
    ],
)
def test_other_shapes_are_left_to_python(enc: ModuleType, change: Callable[[Record], Record], field: str) -> None:
    record = Record("t", 0, 1, b"k", b"{}", [("content-type", b"application/json")], 1000)
    odd = change(record)
    assert enc.encode_batch(EventEncoder("c", "s"), [record, odd], [1, 1], -1) is NotImplemented, field
    if field.startswith("a value"):  # encode_batch falls back: the same body as Python's
        assert batch.encode_batch(EventEncoder("c", "s"), [odd], [1]) == python_body(EventEncoder("c", "s"), [odd], [1])


def test_attempts_of_another_length_are_an_error(enc: ModuleType) -> None:
    record = Record("t", 0, 1, None, None)
    for attempts in ([], [1, 1]):
        with pytest.raises(ValueError, match="zip"):
            enc.encode_batch(EventEncoder("c", "s"), [record], attempts, -1)
        with pytest.raises(ValueError, match="zip"):
            python_body(EventEncoder("c", "s"), [record], attempts)


def test_errors_in_callbacks_propagate(enc: ModuleType) -> None:
    class Broken(EventEncoder):
        def _key(self, key: bytes) -> str:
            raise RuntimeError("no key")

    with pytest.raises(RuntimeError, match="no key"):
        enc.encode_batch(Broken("c", "s"), [Record("t", 0, 1, b"k", None)], [1], -1)


def test_encode_batch_runs_the_c_path_when_built(enc: ModuleType) -> None:
    assert batch._native is enc


def test_key_cache_cleared_while_its_entry_is_looked_at(enc: ModuleType) -> None:
    """keys.get(key) or ...: the truth test of the cached text may run Python code that clears the
    cache, freeing the text while the C path still uses it."""

    class ClearsWhenTested(str):
        def __bool__(self) -> bool:
            self.cache.clear()
            return True

        cache: dict[bytes, str]

    def encoder() -> EventEncoder:
        e = EventEncoder("c", "s")
        text = ClearsWhenTested(',"partitionkey":"cached"')
        text.cache = e._keys
        e._keys[b"k"] = text  # the cache holds the only reference
        return e

    records = [Record("t", 0, 1, b"k", b"{}", [("content-type", b"application/json")], 1000)]
    assert enc.encode_batch(encoder(), records, [1], -1) == python_body(encoder(), records, [1])
