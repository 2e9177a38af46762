"""The worker's record attributes answer the same whether a lookup scans a few headers or the
headers are indexed once (more than eight), and ``partitionkey`` is the key percent-encoded as
``urllib.parse.quote(key, safe="")`` would, with or without the shortcut for keys that need none."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from ferry.filters.attributes import _SCAN_HEADERS, RecordAttributes

FEW = [
    ("Region", b"eu"),
    ("region", b"us"),
    ("Tier", None),
    ("tier", b"gold"),
    ("x-y", b"no"),
    ("ID", b"header-id"),
    ("content-type", b"application/json"),
    ("PartitionKey", b"from-header"),
]
MANY = [(f"h{i}", b"pad") for i in range(12)] + FEW
assert len(FEW) <= _SCAN_HEADERS < len(MANY)


@pytest.mark.parametrize("headers", [FEW, MANY], ids=["scanned", "indexed"])
@pytest.mark.parametrize(
    ("key", "name", "value"),
    [
        (b"k", "region", "eu"),  # the first header of a name wins, whatever its case
        (b"k", "tier", "gold"),  # a header without a value is skipped
        (b"k", "Region", None),  # attribute names are lowercase
        (b"k", "x-y", None),  # not an attribute name
        (b"k", "id", "orders/3/17"),  # the record's own attributes come first
        (b"k", "datacontenttype", "application/json"),
        (b"k", "partitionkey", "k"),
        (None, "partitionkey", "from-header"),  # no key: a header may give it
        (b"k", "subject", None),
    ],
)
def test_header_lookups(
    headers: list[tuple[str, bytes | None]], key: bytes | None, name: str, value: str | None
) -> None:
    a = RecordAttributes("orders", 3, 17, key, headers, 0, "default", "s")
    assert a.get(name) == value and (name in a) is (value is not None)


def test_attribute_names_keep_header_order() -> None:
    a = RecordAttributes("orders", 3, 17, None, FEW, 0, "default", "s")
    own = ["id", "source", "type", "specversion", "time", "kafkatopic", "kafkapartition", "kafkaoffset"]
    assert list(a) == [*own, "ferryattempt", "datacontenttype", "region", "tier", "partitionkey"]
    assert RecordAttributes("t", 0, 0, None, [], 0, "c", "s").get("datacontenttype") == "application/octet-stream"


@pytest.mark.parametrize(
    "key", [b"", b"customer-42", b"A.b_c~d-9", b"eu/42", b"a b", b"100%", "é".encode(), b"\xff\x00", b"+="]
)
def test_partitionkey_is_the_key_percent_encoded(key: bytes) -> None:
    assert RecordAttributes("t", 0, 0, key, [], 0, "c", "s")["partitionkey"] == quote(key, safe="")


def test_one_view_reset_over_records_answers_as_fresh_views() -> None:
    """The worker filters a fetch through one view, reset per record: nothing of a record (its
    header index above all) may leak into the next."""
    records = [
        ("t", 0, 1, b"a", MANY, 1_000),
        ("t", 0, 2, None, [("region", b"ap")], 2_000),
        ("u", 3, 9, b"k/1", FEW, 3_000),
        ("t", 0, 3, b"b", [], 4_000),
    ]
    names = ["region", "tier", "id", "partitionkey", "kafkatopic", "kafkaoffset", "time", "h3", "datacontenttype"]
    view = RecordAttributes("", 0, 0, None, (), 0, "default", "s")
    for rec in records:
        fresh = RecordAttributes(*rec, "default", "s")
        view.reset(*rec)
        assert {n: view.get(n) for n in names} == {n: fresh.get(n) for n in names}, rec
