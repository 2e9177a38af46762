"""The subscription document (docs/contract.md §3): defaults, field-by-field errors, secret masking."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.errors import ValidationError
from ferry.subscription import MASK, PartitionRef, parse

MINIMAL = {"name": "orders-to-billing", "topics": ["orders"], "endpoint": {"url": "http://billing:8000/hook"}}


def with_(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {**MINIMAL, "endpoint": dict(MINIMAL["endpoint"])}
    for path, value in changes.items():
        node = doc
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return doc


def test_defaults_are_the_contract_example() -> None:
    doc = parse(MINIMAL).to_doc()
    assert doc == {
        "name": "orders-to-billing",
        "topics": ["orders"],
        "endpoint": {"url": "http://billing:8000/hook", "timeout_ms": 5000, "headers": {}},
        "ordering": "key",
        "max_in_flight": 100,
        "retry": {"max_attempts": 5, "initial_backoff_ms": 200, "max_backoff_ms": 30000},
        "dead_letter_topic": "orders-to-billing.dlq",
        "start_from": "earliest",
        "state": "active",
    }


def test_round_trip_unmasked() -> None:
    sub = parse(with_(endpoint__headers={"Authorization": "Bearer x"}, ordering="none"))
    assert parse(sub.to_doc(mask_secrets=False)) == sub
    assert sub.retry_topic == "orders-to-billing.retry"
    assert sub.group_id == "ferry.orders-to-billing"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "body"),
        ({**MINIMAL, "name": "Bad Name"}, "name"),
        ({**MINIMAL, "name": "-x"}, "name"),
        ({**MINIMAL, "name": "a" * 64}, "name"),
        ({k: v for k, v in MINIMAL.items() if k != "name"}, "name"),
        ({**MINIMAL, "topics": []}, "topics"),
        ({**MINIMAL, "topics": "orders"}, "topics"),
        ({**MINIMAL, "topics": ["ok", "bad topic"]}, "topics.1"),
        ({**MINIMAL, "topics": ["a", "a"]}, "topics"),
        ({**MINIMAL, "endpoint": "http://x"}, "endpoint"),
        (with_(endpoint__url="ftp://x/"), "endpoint.url"),
        (with_(endpoint__url=""), "endpoint.url"),
        (with_(endpoint__url="http://user:pw@x/"), "endpoint.url"),
        (with_(endpoint__url="http://x:99999/"), "endpoint.url"),
        (with_(endpoint__url="http://x/hook "), "endpoint.url"),  # a pasted trailing space
        (with_(endpoint__url=" http://x/hook"), "endpoint.url"),
        (with_(endpoint__url="http://x/a b"), "endpoint.url"),
        (with_(endpoint__url="http://x/a\r\nX-B: 1"), "endpoint.url"),
        (with_(endpoint__url="http://x/a\tb"), "endpoint.url"),
        (with_(endpoint__timeout_ms=5), "endpoint.timeout_ms"),
        (with_(endpoint__timeout_ms="5000"), "endpoint.timeout_ms"),
        (with_(endpoint__headers={"bad name": "v"}), "endpoint.headers.bad name"),
        (with_(endpoint__headers={"ce-id": "v"}), "endpoint.headers.ce-id"),
        (with_(endpoint__headers={"Host": "v"}), "endpoint.headers.Host"),
        (with_(endpoint__headers={"X-A": "a\r\nb"}), "endpoint.headers.X-A"),
        (with_(endpoint__headers={"X-A": MASK}), "endpoint.headers.X-A"),
        (with_(endpoint__extra=1), "endpoint.extra"),
        ({**MINIMAL, "ordering": "random"}, "ordering"),
        ({**MINIMAL, "max_in_flight": 0}, "max_in_flight"),
        ({**MINIMAL, "max_in_flight": True}, "max_in_flight"),
        ({**MINIMAL, "retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ({**MINIMAL, "retry": {"initial_backoff_ms": 500, "max_backoff_ms": 100}}, "retry.max_backoff_ms"),
        ({**MINIMAL, "dead_letter_topic": "orders"}, "dead_letter_topic"),
        ({**MINIMAL, "dead_letter_topic": "__ferry_offsets"}, "dead_letter_topic"),
        ({**MINIMAL, "dead_letter_topic": "__consumer_offsets"}, "dead_letter_topic"),
        ({**MINIMAL, "dead_letter_topic": "orders-to-billing.retry"}, "dead_letter_topic"),
        ({**MINIMAL, "start_from": "middle"}, "start_from"),
        ({**MINIMAL, "state": "deleted"}, "state"),
        ({**MINIMAL, "colour": "blue"}, "colour"),
    ],
)
def test_invalid_documents_name_the_field(doc: Any, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse(doc)
    assert err.value.field == field


def test_a_stored_url_with_a_space_keeps_loading() -> None:
    # Refused for new documents; one stored before the check must not make the subscription unloadable.
    from ferry.subscription import from_trusted

    assert from_trusted(with_(endpoint__url="http://x/hook ")).endpoint.url == "http://x/hook "
    assert parse(with_(endpoint__url="http://x/a%20b?q=1")).endpoint.url == "http://x/a%20b?q=1"


def test_a_stored_internal_dead_letter_topic_keeps_loading() -> None:
    from ferry.subscription import from_trusted

    assert from_trusted({**MINIMAL, "dead_letter_topic": "__x.dlq"}).dead_letter_topic == "__x.dlq"
    assert parse({**MINIMAL, "dead_letter_topic": "orders_dlq.__x"}).dead_letter_topic == "orders_dlq.__x"


def test_masked_header_keeps_stored_secret() -> None:
    stored = parse(with_(endpoint__headers={"Authorization": "Bearer secret"}))
    shown = stored.to_doc()
    assert shown["endpoint"]["headers"] == {"Authorization": MASK}
    assert "secret" not in repr(shown)
    edited = parse({**shown, "max_in_flight": 7}, previous=stored)
    assert edited.endpoint.headers == {"Authorization": "Bearer secret"}
    assert edited.max_in_flight == 7


def test_partition_ref_key_is_the_offsets_key() -> None:
    assert PartitionRef("s", "t.x", 3).key() == "s/t.x/3"


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ("yes", "batch"),
        ([], "batch"),
        ({"max_records": 0}, "batch.max_records"),
        ({"max_records": 10_001}, "batch.max_records"),
        ({"max_records": "100"}, "batch.max_records"),
        ({"max_records": True}, "batch.max_records"),
        ({"max_bytes": 1023}, "batch.max_bytes"),
        ({"max_bytes": 64 * 1024 * 1024 + 1}, "batch.max_bytes"),
        ({"linger_ms": -1}, "batch.linger_ms"),
        ({"linger_ms": 60_001}, "batch.linger_ms"),
        ({"size": 5}, "batch.size"),
    ],
)
def test_invalid_batch_names_the_field(batch: Any, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse({**MINIMAL, "batch": batch})
    assert err.value.field == field


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (None, None),
        ({}, {"max_records": 100, "max_bytes": 1048576, "linger_ms": 0}),
        ({"max_records": 500, "linger_ms": 5}, {"max_records": 500, "max_bytes": 1048576, "linger_ms": 5}),
        ({"max_records": 1, "max_bytes": 1024}, {"max_records": 1, "max_bytes": 1024, "linger_ms": 0}),
    ],
)
def test_batch_defaults_and_round_trip(batch: Any, expected: Any) -> None:
    sub = parse({**MINIMAL, "batch": batch})
    doc = sub.to_doc()
    assert doc.get("batch") == expected
    assert ("batch" in doc) == (expected is not None)  # single-record documents stay as they were
    assert parse(sub.to_doc(mask_secrets=False)) == sub


@pytest.mark.parametrize(
    ("topics", "message"),
    [(None, "is required"), ("orders", "must be a list of topic names"), ([], "at least one topic")],
)
def test_topics_errors_say_what_to_change(topics: object, message: str) -> None:
    doc = {"name": "s", "endpoint": {"url": "http://e/hook"}}
    if topics is not None:
        doc["topics"] = topics
    with pytest.raises(ValidationError) as e:
        parse(doc)
    assert e.value.field == "topics" and message in e.value.message
