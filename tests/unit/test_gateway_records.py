"""Table tests of gateway/records.py: what a produce body asks for, and how bad input is refused."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ferry.errors import ValidationError
from ferry.gateway.records import (
    MAX_RECORDS,
    Outgoing,
    Refused,
    check_topic,
    json_value,
    loads,
    parse_due,
    parse_record,
    parse_request,
    parse_seed,
    parse_seed_batch,
    parse_txn_record,
    seed_json_bytes,
)

NOW = 1_800_000_000_000
DAY_MS = 24 * 3600 * 1000


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (None, None),
        ("bare text", b"bare text"),
        ("", b""),
        ({"a": 1}, b'{"a":1}'),
        ([1, "x"], b'[1,"x"]'),
        (7, b"7"),
        (True, b"true"),
        ("ünï", "ünï".encode()),
    ],
)
def test_json_value_writes_a_string_bare_and_anything_else_as_json(value: Any, written: bytes | None) -> None:
    assert json_value(value) == written


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (b"12345678901234567890123", b"12345678901234567890123"),  # the audit's: was 1.2345678901234568e+22
        (b"-12345678901234567890123", b"-12345678901234567890123"),
        (b"18446744073709551616", b"18446744073709551616"),  # 2^64: the first beyond orjson's
        (b"-9223372036854775809", b"-9223372036854775809"),  # -2^63 - 1: 19 digits, beyond orjson's
        (b"18446744073709551615", b"18446744073709551615"),  # 2^64 - 1: orjson's own
        (b"-9223372036854775808", b"-9223372036854775808"),
        (b"9" * 300, b"9" * 300),
        (b'{"id": 12345678901234567890123}', b'{"id":12345678901234567890123}'),
        (b'{"a": {"b": {"c": [1, -98765432109876543210987]}}}', b'{"a":{"b":{"c":[1,-98765432109876543210987]}}}'),
        (b"[99999999999999999999, 1, 2.5, 1e-7, 1e22]", b"[99999999999999999999,1,2.5,1e-7,1e+22]"),
        (b'[{"n": 1}, [[100000000000000000000]], "x"]', b'[{"n":1},[[100000000000000000000]],"x"]'),
        (
            rb'{"big": 100000000000000000000, "s": "\u00fc\n\"", "f": 0.1, "t": true}',
            '{"big":100000000000000000000,"s":"ü\\n\\"","f":0.1,"t":true}'.encode(),
        ),
    ],
)
def test_integers_beyond_64_bits_are_written_exactly(value: bytes, written: bytes) -> None:
    """orjson reads them as floats; the gateway writes them as the client wrote them (§9: the
    value's UTF-8 JSON text), at any depth, in arrays, negative."""
    body = b'{"records": [{"key": "k", "value": ' + value + b'}, {"value": ' + value + b', "partition": 0}]}'
    parsed = parse_request(loads(body), "t", NOW)
    assert [p.value for p in parsed if isinstance(p, Outgoing)] == [written, written]


ORDINARY = [
    b"0",
    b"-1",
    b"1234567890123456789",  # 19 digits, within 64 bits
    b"2.5",
    b"1e-7",
    b"-0.0",
    b"1.7976931348623157e308",
    b"5e-324",
    b"123456789012345678901.5",  # a long run of digits in a float: a float, as orjson reads it
    rb'"text \u00fc \ud83d\ude00 \u0001"',
    b'{"a": [1, null, true, {"b": "c"}], "d": 1.25}',
    b'{"a": 1, "a": 2}',
    b'"an id in a string: 12345678901234567890123"',
]


@pytest.mark.parametrize("value", ORDINARY)
@pytest.mark.parametrize("long_run", [False, True])
def test_ordinary_values_are_written_byte_identical_to_orjsons(value: bytes, long_run: bool) -> None:
    """With or without a 19-digit run elsewhere in the body (which takes the stdlib's parse), a
    value without a big integer is written exactly as orjson alone wrote it before."""
    extra = b', {"key": "1234567890123456789012"}' if long_run else b""
    body = b'{"records": [{"value": ' + value + b"}" + extra + b"]}"
    before = [json_value(r.get("value")) for r in orjson.loads(body)["records"]]
    assert [json_value(r.get("value")) for r in loads(body)["records"]] == before


@pytest.mark.parametrize(
    "body",
    [
        b'{"records": [{"value": NaN}], "n": 12345678901234567890123}',
        rb'{"records": [{"value": "\ud800"}], "n": 12345678901234567890123}',  # a lone surrogate
        b'{"records": [{"value": 12345678901234567890123,}]}',
        b"[" * 2000 + b"12345678901234567890123" + b"]" * 2000,
        b'{"records": [{"value": 1' + b"0" * 400 + b"}]}",  # beyond 10^308: orjson refuses it
        b'{"records": [{"value": 1}]',
    ],
)
def test_bodies_orjson_refuses_are_refused_with_long_digit_runs_too(body: bytes) -> None:
    with pytest.raises(ValueError):
        loads(body)


def test_a_deep_body_with_a_big_integer_is_exact_or_refused_never_a_float() -> None:
    """Within orjson's depth, the stdlib's parse of a body with a long digit run may hit the
    interpreter's recursion limit (which other code in the process may have raised): the body is
    then refused, never written with the integer turned into a float."""
    body = b"[" * 1000 + b"12345678901234567890123" + b"]" * 1000
    try:
        parsed = loads(body)
    except ValueError as exc:
        assert "nests too deeply" in str(exc)
        return
    for _ in range(1000):
        (parsed,) = parsed
    assert orjson.dumps(parsed) == b"12345678901234567890123"  # written exactly as sent


def test_a_big_integer_where_a_small_one_belongs_is_refused_as_before() -> None:
    body = loads(b'{"records": [{"partition": 12345678901234567890123}, {"delay_ms": 99999999999999999999}]}')
    parsed = parse_request(body, "t", NOW)
    assert [p.field for p in parsed if isinstance(p, Refused)] == ["records[0].partition", "records[1].delay_ms"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, Outgoing("t", None, None, [])),
        ({"key": "k", "value": "v"}, Outgoing("t", b"k", b"v", [])),
        ({"value_b64": "AAE="}, Outgoing("t", None, b"\x00\x01", [])),
        ({"headers": {"a": "b"}, "partition": 2}, Outgoing("t", None, None, [("a", b"b")], 2)),
        ({"delay_ms": 5}, Outgoing("t", None, None, [], None, NOW + 5)),
        ({"deliver_at": NOW + 9}, Outgoing("t", None, None, [], None, NOW + 9)),
    ],
)
def test_a_good_record(raw: dict[str, Any], expected: Outgoing) -> None:
    assert parse_record(raw, "t", "records[0]", NOW) == expected


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("not an object", "records[3]"),
        ({"valu": 1}, "records[3].valu"),
        ({"key": 5}, "records[3].key"),
        ({"value": 1, "value_b64": "AA=="}, "records[3].value_b64"),
        ({"value_b64": "not base64!"}, "records[3].value_b64"),
        ({"value_b64": 12}, "records[3].value_b64"),
        ({"headers": ["a"]}, "records[3].headers"),
        ({"headers": {"a": 1}}, "records[3].headers.a"),
        ({"headers": {"": "x"}}, "records[3].headers"),
        ({"partition": -1}, "records[3].partition"),
        ({"partition": True}, "records[3].partition"),
        ({"delay_ms": 0}, "records[3].delay_ms"),
        ({"delay_ms": 1.5}, "records[3].delay_ms"),
        ({"delay_ms": 91 * DAY_MS}, "records[3].delay_ms"),
        ({"deliver_at": "tomorrow"}, "records[3].deliver_at"),
        ({"delay_ms": 5, "deliver_at": NOW}, "records[3].deliver_at"),
    ],
)
def test_a_bad_record_is_refused_on_its_own_with_its_field(raw: Any, field: str) -> None:
    refused = parse_record(raw, "t", "records[3]", NOW)
    assert isinstance(refused, Refused) and refused.field == field and refused.error


@pytest.mark.parametrize(
    "name",
    [
        "ferry-deliver-at",  # would deliver a delayed record early
        "ferry-target-topic",  # would deliver it to another topic, past the token's scope
        "ferry-target-partition",
        "ferry-source-topic",
        "ferry-source-offset",
        "ferry-retry-attempts",
        "ferry-transaction-id",
        "ferry-transaction-seq",
        "ferry-error",
        "ferry-attempts",
        "ferry-redriven-from",
        "Ferry-Deliver-At",  # Ferry reads its headers in any letter case
        "FERRY-TARGET-TOPIC",
        "ferry-",
        "ferry-anything-new",
    ],
)
def test_a_header_ferry_reserves_is_refused_on_its_own(name: str) -> None:
    raw = {"key": "e1", "delay_ms": 15_000, "headers": {"ok": "1", name: "123"}}
    refused = parse_record(raw, "t", "records[3]", NOW)
    assert isinstance(refused, Refused) and refused.field == f"records[3].headers.{name}"
    assert "reserved for Ferry" in refused.error
    parsed = parse_request({"records": [{"value": 1}, raw]}, "t", NOW)
    assert parsed[1] == Refused(f"records[1].headers.{name}", refused.error)  # the others are written
    assert isinstance(parsed[0], Outgoing)
    with pytest.raises(ValidationError, match="reserved for Ferry") as caught:
        parse_seed({"topic": "t", "payload": "p", "headers": {name: "t2"}}, NOW)
    assert caught.value.field == f"headers.{name}"


@pytest.mark.parametrize("name", ["ferry", "ferryman", "x-ferry-target-topic", "ferry_target_topic", "ce-ferry-x"])
def test_headers_merely_like_ferrys_are_the_users(name: str) -> None:
    assert parse_record({"headers": {name: "v"}}, "t", "records[0]", NOW) == Outgoing("t", None, None, [(name, b"v")])


def test_a_request_keeps_its_good_records_beside_a_refused_one() -> None:
    parsed = parse_request({"records": [{"value": "a"}, {"key": 1}, {"value": "c"}]}, "t", NOW)
    assert [type(p) for p in parsed] == [Outgoing, Refused, Outgoing]
    assert isinstance(parsed[1], Refused) and parsed[1].field == "records[1].key"


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"key": "k"},
        {"key": ""},
        {"key": None, "value": None},
        {"value": ""},
        {"value": "ünï"},
        {"value": {"n": 1, "pad": "x"}},
        {"value": [1, None]},
        {"value": 0},
        {"value": False},
        {"key": 5, "value": "v"},  # refused: the general path says why
        {"key": ["k"]},
        {"key": "k", "value": "v", "partition": 1},  # not plain: the general path
        {"key": "k", "headers": {}},
        "not an object",
        None,
    ],
)
def test_a_request_parses_each_record_as_parse_record_does(raw: Any) -> None:
    # parse_request takes a shortcut for {"key"?, "value"?} records; it must not change a result
    assert parse_request({"records": [{"value": 1}, raw]}, "t", NOW)[1] == parse_record(raw, "t", "records[1]", NOW)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "records"),
        ({}, "records"),
        ({"records": []}, "records"),
        ({"records": {"value": 1}}, "records"),
        ({"records": [{}], "extra": 1}, "extra"),
        ({"records": [{}] * (MAX_RECORDS + 1)}, "records"),
    ],
)
def test_a_request_of_the_wrong_shape_is_refused_whole(body: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_request(body, "t", NOW)
    assert caught.value.field == field


def test_deliver_at_in_the_past_is_due_now_and_written_through_the_store() -> None:
    assert parse_due(None, NOW - 1000, "records[0]", NOW) == NOW - 1000


# --- the seed's route -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "http_delay", "expected"),
    [
        (
            {"headers": {"content": "goods", "instant": "yes"}, "topic": "topic-open", "payload": "hello proxy"},
            None,
            Outgoing("topic-open", None, b"hello proxy", [("content", b"goods"), ("instant", b"yes")]),
        ),
        ({"topic": "t", "payload": "p", "key": "k"}, None, Outgoing("t", b"k", b"p", [])),
        ({"topic": "t", "payload": "p", "key": ""}, None, Outgoing("t", None, b"p", [])),  # blank: no key
        ({"topic": "t", "payload": "p", "key": " \t\n"}, None, Outgoing("t", None, b"p", [])),
        ({"topic": "t", "payload": "p", "key": " k "}, None, Outgoing("t", b" k ", b"p", [])),  # kept as sent
        ({"topic": "t", "payload": "p", "key": "\u3000"}, None, Outgoing("t", "\u3000".encode(), b"p", [])),
        (  # x-delay among the body's headers (the seed's way) is not written as a header
            {"topic": "t", "payload": "p", "headers": {"X-Delay": "30", "a": "b"}},
            None,
            Outgoing("t", None, b"p", [("a", b"b")], None, NOW + 30_000),
        ),
        ({"topic": "t", "payload": "p"}, "2", Outgoing("t", None, b"p", [], None, NOW + 2_000)),  # an HTTP header
        ({"topic": "t", "payload": "p"}, "+2", Outgoing("t", None, b"p", [], None, NOW + 2_000)),  # parseInt's "+"
        (
            {"topic": "t", "payload": "p", "headers": {"x-delay": "+3"}},
            None,
            Outgoing("t", None, b"p", [], None, NOW + 3_000),
        ),
        (  # the seed writes a header's value as its text; its own docs give "x-delay": 5
            {"topic": "t", "payload": "p", "headers": {"x-delay": 5, "n": 7, "f": 1.5, "ok": True}},
            None,
            Outgoing("t", None, b"p", [("n", b"7"), ("f", b"1.5"), ("ok", b"true")], None, NOW + 5_000),
        ),
        ({"topic": "t", "payload": 123}, None, Outgoing("t", None, b"123", [])),  # the seed reads it as text
        ({"topic": "t", "payload": False}, None, Outgoing("t", None, b"false", [])),
        (
            {"topic": "t", "payload": "p", "headers": {"x-delay": "2"}},
            " 2",
            Outgoing("t", None, b"p", [], None, NOW + 2_000),
        ),
    ],
)
def test_a_seed_body(body: dict[str, Any], http_delay: str | None, expected: Outgoing) -> None:
    assert parse_seed(body, NOW, http_delay) == expected


@pytest.mark.parametrize(
    ("body", "http_delay", "field"),
    [
        ("text", None, "topic"),
        ({"payload": "p"}, None, "topic"),
        ({"topic": "bad topic", "payload": "p"}, None, "topic"),
        ({"topic": "t"}, None, "payload"),
        ({"topic": "t", "payload": {"a": 1}}, None, "payload"),
        ({"topic": "t", "payload": None}, None, "payload"),
        ({"topic": "t", "payload": [1]}, None, "payload"),
        ({"topic": "t", "payload": "p", "headers": {"h": None}}, None, "headers.h"),
        ({"topic": "t", "payload": "p", "headers": {"h": {"a": 1}}}, None, "headers.h"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": 5.0}}, None, "headers.x-delay"),  # as the seed
        ({"topic": "t", "payload": "p", "headers": {"x-delay": True}}, None, "headers.x-delay"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": 0}}, None, "headers.x-delay"),
        ({"topic": "t", "payload": "p", "key": 3}, None, "key"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "soon"}}, None, "headers.x-delay"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "0"}}, None, "headers.x-delay"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "-3"}}, None, "headers.x-delay"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "9999999"}}, None, "headers.x-delay"),  # > 90 days
        ({"topic": "t", "payload": "p"}, "1.5", "x-delay"),
        ({"topic": "t", "payload": "p"}, "++3", "x-delay"),
        ({"topic": "t", "payload": "p"}, "+", "x-delay"),
        ({"topic": "t", "payload": "p"}, "+-3", "x-delay"),
        ({"topic": "t", "payload": "p"}, "1_000", "x-delay"),
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "\uff13"}}, None, "headers.x-delay"),  # a wide 3
        ({"topic": "t", "payload": "p", "headers": {"x-delay": "2"}}, "3", "x-delay"),
    ],
)
def test_a_bad_seed_body_names_its_field(body: Any, http_delay: str | None, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_seed(body, NOW, http_delay)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("orders", True),
        ("billing.eu_2-x", True),
        ("a" * 249, True),
        ("...", True),
        ("a" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("a b", False),
        ("ä", False),
        ("\u0661", False),  # an Arabic-Indic digit: a digit to str.isdigit, not to Kafka
        ("orders\n", False),
    ],
)
def test_topic_names_follow_kafkas_rule(name: str, valid: bool) -> None:
    if valid:
        assert check_topic(name) == name
    else:
        with pytest.raises(ValidationError) as caught:
            check_topic(name)
        assert caught.value.field == "topic"


def test_a_transaction_record_keeps_its_topic_and_fields() -> None:
    raw = {"topic": "orders", "key": "k", "value": {"n": 1}, "partition": 2, "delay_ms": None}
    assert parse_txn_record(raw, "records[0]", NOW) == Outgoing("orders", b"k", b'{"n":1}', [], 2)


@pytest.mark.parametrize(
    ("raw", "field", "says"),
    [
        ({"value": 1}, "records[3].topic", "is required"),
        ("x", "records[3].topic", "is required"),
        ({"topic": "a/b"}, "records[3].topic", "not a valid Kafka topic name"),
        ({"topic": "t", "deliver_at": NOW + 60_000}, "records[3].deliver_at", "remove deliver_at"),
        ({"topic": "t", "deliver_at": 1}, "records[3].deliver_at", "remove deliver_at"),  # past: still a delay
        ({"topic": "t", "deliver_at": "soon"}, "records[3].deliver_at", "remove deliver_at"),
        ({"topic": "t", "delay_ms": 5}, "records[3].delay_ms", "remove delay_ms"),
        ({"topic": "t", "value": 1, "value_b64": "MQ=="}, "records[3].value_b64", "not both"),
        ({"topic": "t", "nope": 1}, "records[3].nope", "unknown field"),
    ],
)
def test_a_bad_transaction_record_names_the_field_given(raw: Any, field: str, says: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_txn_record(raw, "records[3]", NOW)
    assert err.value.field == field and says in err.value.message


_DOC = '{"topic": "t", "payload": "h\u00e9llo \u4f60\u597d"}'


@pytest.mark.parametrize(
    "raw",
    [
        _DOC.encode(),
        b"\xef\xbb\xbf" + _DOC.encode(),  # UTF-8 with a BOM (.NET, PowerShell)
        _DOC.encode("utf-16"),  # a BOM, then UTF-16 (LE here)
        b"\xfe\xff" + _DOC.encode("utf-16-be"),
        _DOC.encode("utf-32"),
        b"\x00\x00\xfe\xff" + _DOC.encode("utf-32-be"),
    ],
)
def test_a_seed_body_with_a_byte_order_mark_is_read_as_the_seed_read_it(raw: bytes) -> None:
    assert parse_seed(loads(seed_json_bytes(raw)), NOW) == Outgoing("t", None, "h\u00e9llo \u4f60\u597d".encode(), [])


@pytest.mark.parametrize("raw", [b"", b"{}", b"\xef\xbb", b"\xff", b"\x00"])
def test_a_body_without_a_byte_order_mark_is_left_as_it_is(raw: bytes) -> None:
    assert seed_json_bytes(raw) is raw


def test_a_byte_order_mark_before_bytes_its_encoding_cannot_read_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        seed_json_bytes(b"\xff\xfe\x00\xd8")  # UTF-16: an unpaired surrogate


@pytest.mark.parametrize(
    ("body", "http_delay", "field"),
    [
        ([], None, "messages"),
        ({}, None, "messages"),
        ({"messages": []}, None, "messages"),
        ({"messages": {"topic": "t"}}, None, "messages"),
        ({"messages": [{"topic": "t", "payload": "p"}] * 10_001}, None, "messages"),
        ({"messages": [{"topic": "t", "payload": "p"}, "text"]}, None, "messages[1].topic"),
        ({"messages": [{"topic": "t", "payload": "p"}, {"topic": "t"}]}, None, "messages[1].payload"),
        (
            {"messages": [{"topic": "t", "payload": "p", "headers": {"x-delay": "0"}}]},
            None,
            "messages[0].headers.x-delay",
        ),
        ({"messages": [{"topic": "t", "payload": "p"}]}, "soon", "x-delay"),  # the request's, not a message's
    ],
)
def test_a_bad_seed_batch_names_the_message(body: Any, http_delay: str | None, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_seed_batch(body, NOW, http_delay)
    assert caught.value.field == field


def test_a_seed_batch_is_its_messages_as_send_takes_them() -> None:
    messages = [{"topic": "a", "payload": "p", "key": "k"}, {"topic": "b", "payload": 1, "headers": {"x-delay": 2}}]
    assert parse_seed_batch({"messages": messages}, NOW) == [
        Outgoing("a", b"k", b"p", []),
        Outgoing("b", None, b"1", [], None, NOW + 2_000),
    ]
