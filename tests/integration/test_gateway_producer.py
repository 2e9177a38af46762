"""The gateway's producer against the real broker: what :meth:`Producer.send_many` queues and how it
answers, for requests that mix plain records (sent as runs in one call) with records that carry
headers or a chosen partition, several topics, the in-flight bytes bound, a record refused for good
(too large) and a request's deadline. Every test runs with the acknowledgements collected in C and in
Python (gateway/acks.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from confluent_kafka import KafkaError

from ferry.gateway.producer import SWEEP_S, Ack, Busy, Producer
from ferry.gateway.records import Outgoing
from tests.integration.test_gateway import read
from tests.support.kafka import create_topic
from tests.support.native import required

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["c", "python"])
def acks_in(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c":
        required("ferry.gateway._acks")
    else:
        monkeypatch.setenv("FERRY_NATIVE", "0")
    return str(request.param)


def rec(
    topic: str,
    key: str | None,
    value: bytes,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
) -> Outgoing:
    return Outgoing(topic, None if key is None else key.encode(), value, headers or [], partition)


def send(
    bootstrap: str, records: Sequence[Outgoing], max_in_flight_bytes: int = 1 << 20
) -> tuple[list[Ack | None], Busy | None]:
    async def run() -> tuple[list[Ack | None], Busy | None]:
        producer = Producer(
            {"bootstrap.servers": bootstrap}, max_in_flight_bytes=max_in_flight_bytes, produce_timeout_ms=10_000
        )
        producer.start(asyncio.get_running_loop())
        try:
            pending, busy = producer.send_many([(r, r.topic, r.size) for r in records])
            acks = await asyncio.wait_for(pending.fut, 30)
            assert producer.in_flight_bytes == 0  # every queued record's bytes are given back
            return acks, busy
        finally:
            producer.close()

    return asyncio.run(run())


def test_mixed_records_keep_request_order_per_key(kafka_bootstrap: str, topic_name: str) -> None:
    other = f"{topic_name}.b"
    create_topic(kafka_bootstrap, topic_name, 3)
    create_topic(kafka_bootstrap, other, 2)
    records = []
    for i in range(60):
        topic = other if i % 20 >= 15 else topic_name  # runs broken by a change of topic
        headers = [("h", str(i).encode())] if i % 7 == 3 else None  # and by records with headers
        partition = 1 if i % 11 == 5 else None  # and by a chosen partition
        records.append(rec(topic, f"k{i % 4}", str(i).encode(), headers, partition))
    acks, busy = send(kafka_bootstrap, records)
    assert busy is None
    assert all(a is not None and a[0] is None for a in acks)
    written = {(t, p, o): (k, v, h) for t in (topic_name, other) for p, o, k, v, h in read(kafka_bootstrap, t)}
    assert len(written) == 60
    for i, (r, ack) in enumerate(zip(records, acks, strict=True)):
        assert ack is not None
        key, value, headers = written[(r.topic, ack[1], ack[2])]
        assert (key, value) == (r.key, r.value), i
        assert headers == r.headers, i
        if r.partition is not None:
            assert ack[1] == r.partition
    # Per key and topic, offsets rise in request order (same key, same partition).
    for topic in (topic_name, other):
        for k in range(4):
            seen = [
                (ack[1], ack[2])
                for r, ack in zip(records, acks, strict=True)
                if ack and r.topic == topic and r.key == f"k{k}".encode() and r.partition is None
            ]
            assert len({p for p, _ in seen}) <= 1
            assert [o for _, o in seen] == sorted(o for _, o in seen)


def test_in_flight_bound_refuses_the_rest_of_the_request(kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    records = [rec(topic_name, "k", b"x" * 100) for _ in range(20)]  # 165 bytes each as counted
    acks, busy = send(kafka_bootstrap, records, max_in_flight_bytes=1000)
    assert isinstance(busy, Busy) and "FERRY_GATEWAY_MAX_IN_FLIGHT_BYTES=1,000" in str(busy)
    assert busy.at == 6
    assert [a is not None for a in acks] == [True] * 6 + [False] * 14  # 6 × 165 ≤ 1,000 < 7 × 165
    assert all(a[0] is None for a in acks[:6] if a is not None)
    assert len(read(kafka_bootstrap, topic_name)) == 6


def test_a_record_too_large_is_refused_alone_and_the_others_are_written(kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    records = [rec(topic_name, None, str(i).encode()) for i in range(3)]
    records.append(rec(topic_name, None, b"x" * 2_000_000))  # over message.max.bytes
    records += [rec(topic_name, None, str(i).encode()) for i in range(4, 6)]
    acks, busy = send(kafka_bootstrap, records, max_in_flight_bytes=16 << 20)
    assert busy is None
    refused = acks[3]
    assert refused is not None and refused[0] is not None
    assert refused[0].code() == KafkaError.MSG_SIZE_TOO_LARGE and refused[1:] == (None, None)
    assert all(a is not None and a[0] is None for i, a in enumerate(acks) if i != 3)
    assert [v for _, _, _, v, _ in read(kafka_bootstrap, topic_name)] == [b"0", b"1", b"2", b"4", b"5"]


def test_a_request_past_its_deadline_is_answered_and_its_bytes_given_back() -> None:
    async def run() -> None:
        # No broker listens there, and nothing polls the producer: the record stays queued.
        producer = Producer(
            {"bootstrap.servers": "127.0.0.1:9"}, max_in_flight_bytes=1 << 20, produce_timeout_ms=60_000
        )
        producer._loop = asyncio.get_running_loop()
        try:
            record = rec("t", "k", b"v")
            pending, busy = producer.send_many([(record, "t", record.size)])
            assert busy is None and producer.in_flight_bytes == record.size
            started = time.monotonic()
            producer.watch(pending, started + 0.3)
            assert await asyncio.wait_for(pending.fut, 5) is None
            assert 0.3 <= time.monotonic() - started < 0.3 + 2 * SWEEP_S
            assert producer.in_flight_bytes == 0 and list(pending.acks) == [None]
        finally:
            producer._p.purge()
            producer.close(1)

    asyncio.run(run())
