"""A filter's loop for one partition (ferry.filters.splitter) splits records exactly as
``Filter.matches`` on each record's view does: same records admitted and rejected, in order, same
error count — for CESQL over every attribute kind (the partition's constants, header attributes
read once per headers tuple, the key, the offset, the time), for the dialects and their nesting,
over fetches whose records share headers tuples, have equal ones, or none; and documents it does
not cover get None."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ferry import filters
from ferry.errors import ValidationError
from ferry.filters.attributes import RecordAttributes
from ferry.filters.splitter import Layout, splitter
from tests.unit.test_filters_cesql_fast import LEAVES, VIEW_HEADERS, VIEW_SOURCES, random_expression

LAYOUT = Layout(offset=2, key=3, headers=5, timestamp=6)  # (topic, partition, offset, key, value, headers, ts)
NAMES = ["region", "n", "s", "o", "kafkapartition", "kafkaoffset", "kafkatopic", "partitionkey", "type", "id"]
NOT_AN_ATTRIBUTE = "averyveryverylongattributename"  # over 20 characters: no header can give it
NAMES += ["time", "datacontenttype", "source", "specversion", "ferryattempt", "missing", "x", NOT_AN_ATTRIBUTE]
RECORD_LEAVES = [leaf for leaf in LEAVES if not leaf.isalpha() or leaf.isupper() or leaf == "false"] + NAMES
HEADER_POOL = [*VIEW_HEADERS, ("n", b"5"), ("N", b" 12 "), ("s", b"abc"), ("o", b"true")]
KEYS = [None, b"k1", b"customer-12", b"a b/\xff", b"7", b""]
EXTRA_SOURCES = [
    "EXISTS kafkatopic AND EXISTS time AND EXISTS datacontenttype",
    "EXISTS missing OR EXISTS x",
    "kafkaoffset > 10 AND id LIKE 'orders/3/%'",
    "kafkapartition + 1 = 4",
    "LENGTH(kafkatopic) = 6 AND UPPER(type) <> 'X'",
    "source = '/ferry/default/s' AND specversion = '1.0' AND ferryattempt = 1",
    "time LIKE '2026-%'",
    f"{NOT_AN_ATTRIBUTE} = 'x'",
]


def fetch(rng: random.Random, topic: str, partition: int, n: int) -> list[tuple[Any, ...]]:
    """Records as the fetch builds them: runs sharing one headers tuple, equal tuples that are not
    the same object, and records without headers."""
    shared = [tuple(rng.sample(HEADER_POOL, rng.randint(0, len(HEADER_POOL)))) for _ in range(3)]
    shared.append(tuple(HEADER_POOL) + tuple((f"pad{i}", b"p") for i in range(9)))  # more than a scan covers
    records = []
    for i in range(n):
        headers = rng.choice(shared)
        if rng.random() < 0.2:
            headers = tuple(list(headers))  # equal, not identical
        offset = rng.choice([i, 17, 2_147_483_648 + i])
        ts = rng.choice([0, 1_795_552_317_864])
        records.append((topic, partition, offset, rng.choice(KEYS), b"v", headers, ts, 100))
    return records


def generic(f: filters.Filter, records: list[tuple[Any, ...]]) -> tuple[list[Any], list[Any], int]:
    admitted, rejected, errors = [], [], 0
    for r in records:
        view = RecordAttributes(r[0], r[1], r[2], r[3], r[5], r[6], "default", "s")
        ok, erred = f.matches(view)
        (admitted if ok else rejected).append(r)
        errors += erred
    return admitted, rejected, errors


def check(doc: Any, rng: random.Random) -> None:
    f = filters.parse(doc, stored=True)  # as the worker compiles it (ferry.worker.admission)
    for topic, partition in (("orders", 3), ("o.2", 0)):
        split = splitter(f, topic, partition, "default", "s", LAYOUT)
        assert split is not None, doc
        records = fetch(rng, topic, partition, 40)
        assert split(records) == generic(f, records), (doc, topic, partition)


def test_cesql_over_every_attribute_kind_splits_as_matches_does() -> None:
    rng = random.Random(11)
    for source in VIEW_SOURCES + EXTRA_SOURCES:
        check({"sql": source}, rng)
    checked = 0
    for _ in range(2000):
        source = random_expression(rng, rng.randint(1, 4), RECORD_LEAVES)
        try:
            filters.parse({"sql": source}, stored=True)
        except ValidationError:
            continue  # an unknown function: never saved, so never on a worker
        check({"sql": source}, rng)
        checked += 1
    assert checked > 1500


@pytest.mark.parametrize("dialect", ["exact", "prefix", "suffix"])
def test_dialects_on_constants_headers_and_the_key(dialect: str) -> None:
    rng = random.Random(5)
    values = ["eu", "", "e", "u", "hk", "k", "customer-1", "orders", "o.2", "3", "0", "dev.ferry.kafka.record"]
    for name in NAMES:
        if name == NOT_AN_ATTRIBUTE:
            continue
        for value in values:
            check({dialect: {name: value}}, rng)


def random_document(rng: random.Random, depth: int, sql_in_any: bool) -> dict[str, Any]:
    kind = rng.randrange(6) if depth > 0 else rng.randrange(2)
    if kind == 0:
        name = rng.choice([n for n in NAMES if n != NOT_AN_ATTRIBUTE])
        return {rng.choice(["exact", "prefix", "suffix"]): {name: rng.choice(["eu", "", "customer", "3", "k1"])}}
    if kind == 1:
        return {"sql": rng.choice(VIEW_SOURCES + EXTRA_SOURCES)}
    if kind == 2:
        return {"not": random_document(rng, depth - 1, sql_in_any)}
    parts = [random_document(rng, depth - 1, sql_in_any) for _ in range(rng.randint(1, 3))]
    if kind == 3 and (sql_in_any or not any("sql" in str(p) for p in parts)):
        return {"any": parts}
    return {"all": parts}


def test_nested_dialects_split_as_matches_does() -> None:
    rng = random.Random(3)
    for _ in range(400):
        check(random_document(rng, 3, sql_in_any=False), rng)


@pytest.mark.parametrize(
    "doc",
    [
        {"any": [{"exact": {"region": "eu"}}, {"sql": "n > 3"}]},
        {"not": {"any": [{"sql": "n > 3"}]}},
        {"all": [{"exact": {"region": "eu"}}, {"any": [{"all": [{"sql": "TRUE"}]}]}]},
        {"sql": " + ".join(["n"] * 150) + " = 750"},  # nested beyond what Python compiles
    ],
)
def test_documents_the_loop_does_not_cover_get_none(doc: Any) -> None:
    assert splitter(filters.parse(doc), "orders", 3, "default", "s", LAYOUT) is None


def test_recurring_keys_keep_their_text_and_new_ones_are_encoded() -> None:
    """The loop remembers keys' partitionkey text; past its bound it starts again, still right."""
    f = filters.parse({"prefix": {"partitionkey": "a%20"}})
    split = splitter(f, "orders", 3, "default", "s", LAYOUT)
    assert split is not None
    records = [("orders", 3, i, f"a {i % 5000}".encode(), b"v", (), 0, 100) for i in range(12_000)]
    admitted, rejected, errors = split(records)
    assert (len(admitted), len(rejected), errors) == (12_000, 0, 0)
    assert split([("orders", 3, 0, b"ab", b"v", (), 0, 100)])[1]  # 'ab' has no %20: rejected


@pytest.mark.parametrize("rejected_at", [None, 0, 1, 499])
def test_a_fetch_that_all_passes_comes_back_as_it_is_and_one_rejection_anywhere_splits_it(
    rejected_at: int | None,
) -> None:
    split = splitter(filters.parse({"exact": {"region": "eu"}}), "orders", 3, "default", "s", LAYOUT)
    assert split is not None
    eu, us = (("region", b"eu"),), (("region", b"us"),)
    records = [("orders", 3, i, b"k", b"v", us if i == rejected_at else eu, 0, 100) for i in range(500)]
    admitted, rejected, errors = split(records)
    if rejected_at is None:
        assert admitted is records and rejected == [] and errors == 0
    else:
        assert admitted == records[:rejected_at] + records[rejected_at + 1 :]
        assert rejected == [records[rejected_at]] and errors == 0


@pytest.mark.parametrize(
    "doc",
    [
        {"sql": "region = 'eu' AND LENGTH(partitionkey) > 2"},  # the loop
        {"any": [{"sql": "region = 'eu' AND n > 3"}, {"prefix": {"partitionkey": "custom"}}]},  # per record
    ],
)
def test_the_worker_admission_splits_a_fetch_and_counts_errors_on_either_path(doc: Any) -> None:
    from ferry.subscription import parse
    from ferry.worker.admission import Admission
    from ferry.worker.push import Record

    sub = parse({"name": "s", "topics": ["orders"], "endpoint": {"url": "http://e/hook"}, "filter": doc})
    admission = Admission(sub, "default", "orders", 3)
    assert (admission._split is not None) == ("sql" in doc)  # which path this case takes
    rng = random.Random(1)
    records = [Record(*r[:7]) for r in fetch(rng, "orders", 3, 300)]
    admitted, rejected = admission.split(records)
    expected = generic(filters.parse(doc), records)
    assert (admitted, rejected, admission.errors) == expected
    assert [admission.admits(r) for r in records] == [r in admitted for r in records]
