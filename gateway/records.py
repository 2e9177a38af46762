"""What a produce request asks for, validated: the records of docs/contract.md §9 as Kafka records.

Use case: the gateway's two routes (native and seed-compatible) and the transaction route turn
their JSON bodies into :class:`Outgoing` records here; the service then writes them. Pure: no I/O,
the caller passes the time (table tests: tests/unit/test_gateway_records.py).

A request is refused as a whole (:class:`ferry.errors.ValidationError`, 400) only when its shape is
wrong (not an object, no ``records`` list, more than :data:`MAX_RECORDS`). A record that is wrong
on its own is refused on its own (:class:`Refused`, with its ``records[i].…`` field) and the
request's other records are still written: its result in the answer says why.

Plain records (a key and a value, nothing else: most of them) are made in C where
``gateway/_plain.c`` is built; this module's Python is the reference it is tested against
(tests/unit/test_gateway_plain.py), and ``FERRY_NATIVE=0`` runs it instead. A body whose every
record is plain is read in C straight from its bytes (:func:`read_plain`), without building its
JSON objects first (tests/unit/test_gateway_body.py).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, cast

import orjson

from ferry import delay, native
from ferry.digits import ascii_digits
from ferry.errors import ValidationError

MAX_RECORDS = 10_000
MAX_HEADER_NAME = 255
RESERVED_HEADER_PREFIX = "ferry-"
"""Header names Ferry writes itself (``ferry-deliver-at``, ``ferry-target-topic``, ``ferry-source-*``,
``ferry-retry-attempts``, ``ferry-transaction-*``, ``ferry-error``, …), in any letter case: a
record that sets one is refused, since the delay store and the dead-letter and retry paths act on
them (a user's ``ferry-target-topic`` would deliver the record to another topic, past the token's
scope; a user's ``ferry-deliver-at`` would deliver it early)."""
_RECORD_FIELDS = frozenset({"key", "value", "value_b64", "headers", "partition", "delay_ms", "deliver_at"})
_PLAIN_FIELDS = frozenset({"key", "value"})


@dataclass(slots=True)
class Outgoing:
    """One record to write: to ``topic`` now, or (``due_ms`` set) through the delay store. Not
    changed once made (not frozen only because a frozen dataclass is slower to make, per record)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None = None
    due_ms: int | None = None

    @property
    def size(self) -> int:
        """Bytes it holds in the producer's queue, about: key, value, headers and 64 of overhead."""
        size = len(self.key or b"") + len(self.value or b"") + 64
        if self.headers:
            size += sum(len(n) + len(v) for n, v in self.headers)
        return size


@dataclass(frozen=True, slots=True)
class Refused:
    field: str
    error: str

    def result(self) -> dict[str, str]:
        return {"error": self.error, "field": self.field}


_PlainTwin = Callable[[list[Any], str], tuple[list[Outgoing | None], int]]
_BodyReader = Callable[[bytes, str, int], list[Outgoing | Refused] | None]
SendItem = tuple[Outgoing, str, int]
"""A record as the producer takes it: the record, the topic to write it to, its size."""
_ItemsTwin = Callable[[list[Outgoing | Refused]], list[SendItem] | None]


class _Twins(NamedTuple):
    plain: _PlainTwin | None
    read: _BodyReader | None
    send_items: _ItemsTwin | None
    digit_run: Callable[[bytes, int], bool] | None


def _twins() -> _Twins:
    """The C twins (``gateway/_plain.c``), set up for :class:`Outgoing`: of :func:`parse_request`'s
    plain-record branch, of :func:`loads` + :func:`parse_request` for a body of plain records, of
    :func:`send_items`, and of :func:`loads`' digit-run check; None when not built or
    ``FERRY_NATIVE=0``."""
    c = native.load("ferry.gateway._plain")
    if c is None:
        return _Twins(None, None, None, None)
    c.setup(Outgoing, tuple(f.name for f in fields(Outgoing)), orjson.dumps, orjson.JSONEncodeError)
    return _Twins(c.plain, c.read, c.send_items, c.digit_run)


_plain, _read, _send_items, _digit_run = _twins()
NATIVE = _plain is not None
"""Whether plain records are made in C (the gateway's start log line says)."""


_DIGITS_AS_ZERO = bytes(48 if 48 <= c <= 57 else 49 for c in range(256))
_LONG_DIGITS = b"0" * 19


_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1


def loads(raw: bytes) -> Any:
    """A request's JSON body, with every integer exact. orjson reads an integer beyond 64 bits
    (outside -2^63 .. 2^64 - 1) as a float, so ``12345678901234567890123`` would be written as
    ``1.2345678901234568e+22``. A body with a run of 19 digits or more (any such integer has at
    least 19) is read again with the stdlib's ``json``, each such integer kept as its text in an
    ``orjson.Fragment``, which :func:`json_value` writes back as it came. orjson reads every body
    first, so the bodies accepted and the errors are the same as without this (integers beyond
    about 10^308 are refused, as orjson does; so is a body with such a run nested over ~990 levels
    deep, beyond the stdlib parser's recursion). Raises ``ValueError``.

    Cost: the digit-run check (:func:`long_digit_run`) is one pass over the body's bytes in C
    (in Python one ``bytes.translate`` and a search of its result, ~1.5 ns per byte, a tenth to a
    third of orjson's parse of the same body); the second parse runs only on bodies with such a
    run."""
    doc = orjson.loads(raw)
    if len(raw) < 19 or not long_digit_run(raw):
        return doc
    try:
        return json.loads(raw.decode(), parse_int=_exact_int)
    except RecursionError:
        raise ValueError("the body nests too deeply") from None


def long_digit_run(raw: bytes) -> bool:
    """Whether ``raw`` holds 19 ASCII digits in a row (in C where built)."""
    if _digit_run is not None:
        return _digit_run(raw, 19)
    return _LONG_DIGITS in raw.translate(_DIGITS_AS_ZERO)


def _exact_int(text: str) -> int | orjson.Fragment:
    if len(text) < 19:
        return int(text)
    n = int(text)
    return n if _I64_MIN <= n <= _U64_MAX else orjson.Fragment(text)


def check_topic(topic: str, field: str = "topic") -> str:
    if not delay.valid_topic_name(topic):
        raise ValidationError(
            field,
            f"{topic[:80]!r} is not a valid Kafka topic name (1–249 of a-z A-Z 0-9 . _ -, not '.' or '..')",
        )
    return topic


def read_plain(raw: bytes, topic: str) -> list[Outgoing | Refused] | None:
    """The records of a ``POST /api/v1/topics/{topic}/records`` body ``raw`` whose every record is
    plain, read in C straight from its bytes: what ``parse_request(loads(raw), topic, …)`` makes of
    it, at a fraction of the cost. None for any other body (and where the C code is not built):
    then read it with :func:`loads` and :func:`parse_request`, which make or refuse it. Which
    bodies it takes: ``gateway/_body.h``. (Every record it makes is an :class:`Outgoing`.)"""
    return None if _read is None else _read(raw, topic, MAX_RECORDS)


def send_items(records: list[Outgoing | Refused]) -> list[SendItem] | None:
    """Each record as the producer takes it, when every one is an :class:`Outgoing` sent now as it
    is (no headers, no chosen partition, not delayed): the common request, without looking at each
    record in Python (in C where built). None otherwise: the caller looks at each."""
    if _send_items is not None:
        return _send_items(records)
    items = []
    for rec in records:
        if type(rec) is not Outgoing or rec.headers or rec.partition is not None or rec.due_ms is not None:
            return None
        items.append((rec, rec.topic, rec.size))
    return items


def parse_request(body: Any, topic: str, now_ms: int) -> list[Outgoing | Refused]:
    """The records of a ``POST /api/v1/topics/{topic}/records`` body, in order."""
    if not isinstance(body, dict):
        raise ValidationError("records", 'the body must be a JSON object {"records": [...]}')
    unknown = set(body) - {"records"}
    if unknown:
        raise ValidationError(sorted(unknown)[0], 'unknown field; the body is {"records": [...]}')
    records = body.get("records")
    if not isinstance(records, list) or not records:
        raise ValidationError("records", "must be a non-empty list of records")
    if len(records) > MAX_RECORDS:
        raise ValidationError("records", f"at most {MAX_RECORDS:,} records per request, got {len(records):,}")
    if _plain is not None:
        made, general = _plain(records, topic)
        parsed = cast(list[Outgoing | Refused | None], made)
        if general:  # the records that are not plain, or whose value nests too deep, as below
            for i, rec in enumerate(parsed):
                if rec is None:
                    parsed[i] = parse_record(records[i], topic, f"records[{i}]", now_ms)
        return cast(list[Outgoing | Refused], parsed)
    out: list[Outgoing | Refused] = []
    append = out.append
    for i, raw in enumerate(records):
        # The common record, {"key"?: string, "value"?: any}, without the general path's checks
        # (the same result: table-tested against parse_record).
        if type(raw) is dict and raw.keys() <= _PLAIN_FIELDS:
            key = raw.get("key")
            if key is None or type(key) is str:
                try:
                    value = json_value(raw.get("value"))
                except orjson.JSONEncodeError:  # nested too deep: refused below, with its field
                    pass
                else:
                    append(Outgoing(topic, None if key is None else key.encode(), value, []))
                    continue
        append(parse_record(raw, topic, f"records[{i}]", now_ms))
    return out


def parse_record(raw: Any, topic: str, path: str, now_ms: int) -> Outgoing | Refused:
    """One record R of §9, or why it is refused."""
    try:
        return _record(raw, topic, path, now_ms)
    except ValidationError as exc:
        return Refused(exc.field, exc.message)


def _record(raw: Any, topic: str, path: str, now_ms: int) -> Outgoing:
    if not isinstance(raw, dict):
        raise ValidationError(path, "a record must be a JSON object")
    if not raw.keys() <= _RECORD_FIELDS:
        unknown = sorted(set(raw) - _RECORD_FIELDS)[0]
        raise ValidationError(f"{path}.{unknown}", f"unknown field; a record has {sorted(_RECORD_FIELDS)}")
    key = raw.get("key")
    if key is not None and not isinstance(key, str):
        raise ValidationError(f"{path}.key", "must be a string or null")
    if "value" in raw and "value_b64" in raw:
        raise ValidationError(f"{path}.value_b64", "give value or value_b64, not both")
    value: bytes | None
    if "value_b64" in raw:
        value = _b64(raw["value_b64"], f"{path}.value_b64")
    else:
        try:
            value = json_value(raw.get("value"))
        except orjson.JSONEncodeError:  # orjson writes at most 255 levels; its reader takes more
            raise ValidationError(
                f"{path}.value", "nests deeper than 255 levels; flatten it, or send its bytes as value_b64"
            ) from None
    headers = parse_headers(raw.get("headers"), f"{path}.headers")
    partition = raw.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
        raise ValidationError(f"{path}.partition", "must be a partition number (an integer ≥ 0)")
    due = parse_due(raw.get("delay_ms"), raw.get("deliver_at"), path, now_ms)
    return Outgoing(topic, None if key is None else key.encode(), value, headers, partition, due)


def parse_txn_record(raw: Any, path: str, now_ms: int) -> Outgoing:
    """One record of a transaction (§11): ``{"topic", ...R}``, written when the transaction
    commits, so never delayed. Raises :class:`ValidationError` naming the field to change."""
    topic = raw.get("topic") if isinstance(raw, dict) else None
    if not isinstance(topic, str):
        raise ValidationError(f"{path}.topic", "is required: the topic to write the record to")
    check_topic(topic, f"{path}.topic")
    for name in ("delay_ms", "deliver_at"):  # the one given, before parse_due judges its value
        if raw.get(name) is not None:
            raise ValidationError(
                f"{path}.{name}",
                f"remove {name}: the records of a transaction are written when it commits and cannot be delayed",
            )
    return _record({k: v for k, v in raw.items() if k != "topic"}, topic, path, now_ms)


def json_value(value: Any) -> bytes | None:
    """§9: a JSON string is written as its bare text, any other JSON value as its UTF-8 JSON text
    (compact; an integer beyond 64 bits, an ``orjson.Fragment`` from :func:`loads`, as it came)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value)


def _b64(raw: Any, field: str) -> bytes:
    if not isinstance(raw, str):
        raise ValidationError(field, "must be a base64 string")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(field, "is not valid base64 (RFC 4648, with padding)") from None


def parse_headers(raw: Any, field: str) -> list[tuple[str, bytes]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ValidationError(field, "must be an object of header name → string value")
    out = []
    for name, value in raw.items():
        if not name or len(name) > MAX_HEADER_NAME:
            raise ValidationError(field, f"header names must be 1–{MAX_HEADER_NAME} characters")
        if name[:6].lower() == RESERVED_HEADER_PREFIX:
            raise ValidationError(
                f"{field}.{name}",
                f"header names starting with {RESERVED_HEADER_PREFIX!r} are reserved for Ferry; rename or drop "
                "it (a re-produced dead letter: drop its ferry-* headers)",
            )
        if not isinstance(value, str):
            raise ValidationError(f"{field}.{name}", "must be a string")
        out.append((name, value.encode()))
    return out


def parse_due(delay_ms: Any, deliver_at: Any, path: str, now_ms: int) -> int | None:
    """The due time of a delayed record (epoch ms), None for a record written now."""
    if delay_ms is None and deliver_at is None:
        return None
    if delay_ms is not None and deliver_at is not None:
        raise ValidationError(f"{path}.deliver_at", "give delay_ms or deliver_at, not both")
    name, raw = ("delay_ms", delay_ms) if delay_ms is not None else ("deliver_at", deliver_at)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < (1 if name == "delay_ms" else 0):
        what = "a delay in milliseconds (an integer ≥ 1)" if name == "delay_ms" else "epoch milliseconds (an integer)"
        raise ValidationError(f"{path}.{name}", f"must be {what}")
    due = now_ms + raw if name == "delay_ms" else raw
    try:
        delay.check_delay(due, now_ms)
    except delay.InvalidSchedule as exc:
        raise ValidationError(f"{path}.{name}", str(exc)) from None
    return due


# --- the seed's route: POST /v1/kafka/send -------------------------------------------------------


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16's, which begins it
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def seed_json_bytes(raw: bytes) -> bytes:
    """A seed body as UTF-8 JSON without a byte order mark. The seed's JSON reader (Jackson) takes
    a body that starts with a UTF-8, UTF-16 or UTF-32 byte order mark, in that encoding, which
    some clients send (.NET's and PowerShell's UTF-8 writers); orjson refuses a BOM. Raises
    ``ValueError`` for a body its BOM's encoding cannot decode."""
    if raw[:1] not in (b"\xef", b"\xff", b"\xfe", b"\x00"):
        return raw
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            return raw.decode(encoding).encode()
    return raw


def parse_seed(body: Any, now_ms: int, request_delay: str | None = None) -> Outgoing:
    """The body of the seed producer proxy's ``POST /v1/kafka/send`` (§9):
    ``{"topic", "payload", "key"?, "headers"?}``; an ``x-delay`` header (whole seconds) delays it.
    ``x-delay`` is read among the body's ``headers`` (the seed's way) or, for clients that send it
    as an HTTP header, from ``request_delay``; given both ways, the two must agree."""
    if not isinstance(body, dict):
        raise ValidationError("topic", 'the body must be a JSON object {"topic": ..., "payload": ...}')
    topic = body.get("topic")
    if not isinstance(topic, str):
        raise ValidationError("topic", "is required (a string)")
    check_topic(topic)
    payload = _seed_text(body.get("payload"))
    if not isinstance(payload, str):
        raise ValidationError("payload", "is required (a string)")
    key = body.get("key")
    if key is not None and not isinstance(key, str):
        raise ValidationError("key", "must be a string")
    if key is not None and not key.strip(_JAVA_BLANK):
        key = None  # as the seed: a blank key is no key (else every such record goes to one partition)
    raw_headers = body.get("headers")
    if isinstance(raw_headers, dict):
        raw_headers = {name: _seed_text(value) for name, value in raw_headers.items()}
    headers = parse_headers(raw_headers, "headers")
    due = None
    rest = []
    for name, value in headers:
        if name.lower() != "x-delay":
            rest.append((name, value))
            continue
        due = _seed_due(value.decode("utf-8", "replace"), "headers.x-delay", now_ms)
    if request_delay is not None:
        from_request = _seed_due(request_delay, "x-delay", now_ms)
        if due is not None and due != from_request:
            raise ValidationError("x-delay", "the x-delay HTTP header and headers.x-delay differ: give one")
        due = from_request
    return Outgoing(topic, None if key is None else key.encode(), payload.encode(), rest, None, due)


def parse_seed_batch(body: Any, now_ms: int, request_delay: str | None = None) -> list[Outgoing]:
    """The body of the seed's ``POST /v1/kafka/send_batch``: ``{"messages": [...]}``, each message a
    :func:`parse_seed` body (1 to :data:`MAX_RECORDS`). A wrong message refuses the whole request,
    its field named ``messages[i].<field>``, so that nothing of a request half understood is written."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValidationError(
            "messages", 'the body must be {"messages": [...]}, each message a /v1/kafka/send body {"topic", "payload"}'
        )
    if len(messages) > MAX_RECORDS:
        raise ValidationError("messages", f"at most {MAX_RECORDS:,} messages per request, got {len(messages):,}")
    out = []
    for i, message in enumerate(messages):
        try:
            out.append(parse_seed(message, now_ms, request_delay))
        except ValidationError as exc:
            field = exc.field if exc.field == "x-delay" else f"messages[{i}].{exc.field}"
            raise ValidationError(field, exc.message) from None
    return out


_JAVA_BLANK = "".join(map(chr, range(0x21)))
"""What Java's ``String.trim()`` strips: the seed's test for a blank key."""


def _seed_text(value: Any) -> Any:
    """A seed body's scalar as the text the seed wrote: the seed reads ``payload`` as a string
    (a JSON number or boolean becomes its text) and writes each header's value as its text (its own
    docs give ``"x-delay": 5``); a number or boolean here becomes its JSON text. Anything else is
    returned as it is, for the caller to refuse (``null``, an object, a list)."""
    if isinstance(value, bool | int | float | orjson.Fragment):
        return orjson.dumps(value).decode()
    return value


def _seed_due(raw: str, field: str, now_ms: int) -> int:
    """The due time of an ``x-delay`` of ``raw`` whole seconds from ``now_ms``."""
    digits = raw.strip()
    digits = digits[1:] if digits[:1] == "+" else digits  # "+5": the seed's Integer.parseInt took it
    seconds = int(digits) if ascii_digits(digits) else 0
    if seconds <= 0:
        raise ValidationError(field, f"must be a whole number of seconds > 0, not {raw[:40]!r}")
    try:
        due = parse_due(seconds * 1000, None, "headers", now_ms)
    except ValidationError as exc:
        raise ValidationError(field, exc.message) from None
    assert due is not None  # a delay was given
    return due
