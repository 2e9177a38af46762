"""CloudEvents binary-mode headers exactly as docs/contract.md §4 lists them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ferry.worker.push import Record, cloudevent_headers, rfc3339_ms, with_endpoint_headers


def test_contract_headers() -> None:
    r = Record("orders", 3, 42, b"cust/\xc3\xa9", b"{}", [("content-type", b"application/json")], 1763800000123)
    h = cloudevent_headers(r, "default", "orders-to-billing", 2)
    assert h == {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": "orders/3/42",
        "ce-source": "/ferry/default/orders-to-billing",
        "ce-type": "dev.ferry.kafka.record",
        "ce-time": "2025-11-22T08:26:40.123Z",
        "ce-kafkatopic": "orders",
        "ce-kafkapartition": "3",
        "ce-kafkaoffset": "42",
        "ce-partitionkey": "cust%2F%C3%A9",
        "ce-ferryattempt": "2",
    }


def test_null_key_and_no_content_type() -> None:
    h = cloudevent_headers(Record("t", 0, 0, None, None), "c", "s", 1)
    assert "ce-partitionkey" not in h
    assert h["Content-Type"] == "application/octet-stream"


def test_record_headers_forwarded_when_valid() -> None:
    r = Record(
        "t",
        0,
        0,
        b"\xff\xfe",  # not UTF-8: still percent-encoded byte for byte
        b"",
        [
            ("trace-id", b"abc"),
            ("bad name", b"x"),  # not an HTTP header name: dropped
            ("ce-id", b"spoof"),  # may not override Ferry's own
            ("Host", b"evil"),
            ("bin", b"\x00\r\n\xff"),  # unsafe bytes are percent-encoded
            ("empty", None),
        ],
    )
    h = cloudevent_headers(r, "c", "s", 1)
    assert h["trace-id"] == "abc"
    assert h["bin"] == "%00%0D%0A%FF"
    assert h["ce-id"] == "t/0/0"
    assert h["ce-partitionkey"] == "%FF%FE"
    assert "bad name" not in h and "Host" not in h and "empty" not in h


@pytest.mark.parametrize(
    ("ts_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_000_007, "1970-01-01T00:16:40.007Z"),
        (1_763_800_000_123, "2025-11-22T08:26:40.123Z"),
        (1_763_800_000_999, "2025-11-22T08:26:40.999Z"),
        (1_763_800_001_000, "2025-11-22T08:26:41.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),  # Kafka's "no timestamp"
    ],
)
def test_rfc3339_ms(ts_ms: int, text: str) -> None:
    assert rfc3339_ms(ts_ms) == text
    assert text == datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _lines(raw: bytes) -> list[bytes]:
    assert raw.startswith(b"\r\n")
    return sorted(raw[2:].split(b"\r\n"))


@pytest.mark.parametrize(
    ("record", "attempt", "endpoint_headers"),
    [
        (
            Record("orders", 3, 42, b"cust/\xc3\xa9", b"{}", [("content-type", b"application/json")], 1763800000123),
            1,
            {},
        ),
        (Record("t", 0, 0, None, None), 7, {"Authorization": "Bearer x", "X-Team": "billing"}),
        (Record("t", 11, 9, b"", b"v", [("trace-id", b"abc"), ("bin", b"\x00\xff"), ("ce-id", b"spoof")], -1), 2, {}),
        (
            Record("t", 0, 1, b"k", b"v", [("authorization", b"Bearer producer"), ("x-a", b"1")]),
            1,
            {"Authorization": "s"},
        ),
    ],
)
def test_header_lines_are_the_contract_headers_encoded(
    record: Record, attempt: int, endpoint_headers: dict[str, str]
) -> None:
    """PushClient keeps a partition's constant header lines encoded: what it sends must be exactly
    cloudevent_headers() plus the endpoint's headers, for the first record and for later ones."""
    from ferry.netguard import EndpointPolicy
    from ferry.subscription import parse
    from ferry.worker.http1 import encode_header_lines
    from ferry.worker.push import PushClient

    sub = parse(
        {"name": "s", "topics": ["t"], "endpoint": {"url": "http://127.0.0.1:1/x", "headers": endpoint_headers}}
    )
    client = PushClient(EndpointPolicy(), "c")
    later = Record(record.topic, record.partition, record.offset + 5, b"other", record.value, record.headers, 1)
    for r in (record, later, record):
        expected = with_endpoint_headers(cloudevent_headers(r, "c", "s", attempt), sub.endpoint.headers)
        assert _lines(client.header_lines(sub, r, attempt)) == _lines(encode_header_lines(expected))
    # An edited subscription (new object) is not served the old one's lines.
    edited = parse(
        {"name": "s", "topics": ["t"], "endpoint": {"url": "http://127.0.0.1:1/x", "headers": {"X-New": "1"}}}
    )
    expected = cloudevent_headers(record, "c", "s", attempt)
    expected.update({"X-New": "1"})
    assert _lines(client.header_lines(edited, record, attempt)) == _lines(encode_header_lines(expected))


def test_endpoint_headers_win_over_record_headers_of_the_same_name() -> None:
    """The subscription's header reaches the endpoint once, whatever case a record's header of the
    same name has (before, both went: a producer's ``authorization`` beside the configured one)."""
    from ferry.netguard import EndpointPolicy
    from ferry.subscription import parse
    from ferry.worker.push import PushClient

    sub = parse(
        {
            "name": "s",
            "topics": ["t"],
            "endpoint": {"url": "http://127.0.0.1:1/x", "headers": {"Authorization": "Bearer configured"}},
        }
    )
    r = Record("t", 0, 0, None, b"", [("authorization", b"Bearer producer"), ("X-Trace", b"1")])
    lines = _lines(PushClient(EndpointPolicy(), "c").header_lines(sub, r, 1))
    auth = [line for line in lines if line.lower().startswith(b"authorization:")]
    assert auth == [b"Authorization: Bearer configured"]
    assert b"X-Trace: 1" in lines


def test_a_repeated_record_header_is_sent_once_with_its_last_value() -> None:
    headers = [("x-tag", b"a"), ("X-Tag", b"b"), ("x-other", b"1"), ("x-tag", b"c"), ("x-other", b"2")]
    r = Record("orders", 0, 1, None, b"{}", headers, 1763800000123)
    h = cloudevent_headers(r, "default", "s", 1)
    assert [(k, v) for k, v in h.items() if k.lower().startswith("x-")] == [("x-other", "2"), ("x-tag", "c")]
