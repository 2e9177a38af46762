"""ferry.served_producer against the real broker: acknowledgements settle the writers' futures on
their loop, a closed loop drops them without raising, and close() flushes what is queued."""

from __future__ import annotations

import asyncio
import secrets
import threading

import pytest

from ferry import kafka
from ferry.served_producer import ServedProducer
from tests.support.kafka import create_topic

pytestmark = pytest.mark.integration


def test_concurrent_writers_get_their_own_acknowledgements(kafka_bootstrap: str) -> None:
    topic = f"served-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 3)
    served = ServedProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 1}, "test-served")

    async def write(i: int) -> tuple[int, int, int]:
        acked, on_delivery = served.acknowledgement()
        served.producer.produce(topic, value=str(i).encode(), partition=i % 3, on_delivery=on_delivery)
        err, partition, offset = await asyncio.wait_for(acked, 20)
        assert err is None
        return i, partition, offset

    async def main() -> list[tuple[int, int, int]]:
        return await asyncio.wait_for(asyncio.gather(*(write(i) for i in range(200))), 30)

    try:
        got = asyncio.run(main())
    finally:
        served.close(10)
    assert [i for i, _, _ in got] == list(range(200))
    assert all(partition == i % 3 for i, partition, _ in got)
    for p in range(3):  # each partition's writes got distinct offsets 0..n-1
        offsets = sorted(offset for _, partition, offset in got if partition == p)
        assert offsets == list(range(len(offsets)))


def test_close_flushes_and_a_closed_loop_drops_its_acknowledgements(kafka_bootstrap: str) -> None:
    """Writes queued on a loop that has closed since: close() flushes them to the broker, and their
    acknowledgements, with nobody left to settle, raise nothing in the poll thread."""
    topic = f"served-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    served = ServedProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 500}, "test-served")
    errors: list[BaseException] = []
    hook = threading.excepthook

    def record(args: threading.ExceptHookArgs) -> None:
        errors.append(args.exc_value or RuntimeError("an exception without a value"))

    threading.excepthook = record
    try:

        async def queue_writes() -> None:
            for i in range(10):
                _, on_delivery = served.acknowledgement()
                served.producer.produce(topic, value=str(i).encode(), on_delivery=on_delivery)

        asyncio.run(queue_writes())  # the loop is closed before the linger is over
        served.close(10)
    finally:
        threading.excepthook = hook
    assert errors == []
    reader = kafka.reader({"bootstrap.servers": kafka_bootstrap}, "test-served")
    try:
        values: list[bytes] = []
        kafka.read_partitions_to_end(reader, {(topic, 0): 0}, lambda m: values.append(m.value() or b""), timeout_s=20)
    finally:
        reader.close()
    assert values == [str(i).encode() for i in range(10)]
