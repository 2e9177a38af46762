"""CloudEvents binary-mode headers exactly as CONTRACT section 4 lists them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.push import Record, cloudevent_headers, rfc3339_ms


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
