"""The fetch thread's backpressure against the real broker (worker.fetch + worker.backpressure).

A partition that fills holds instead of pausing, so librdkafka never throws away what it fetched:
each record is fetched from the broker once (librdkafka's own statistics count what it received),
handed over once and in order. A held partition whose consumer has nothing open stops being
consumed; a paused one stops whatever the others do.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ferry.worker.backpressure import Gate, consume_batch, next_gate
from ferry.worker.fetch import Batch, Fetcher
from tests.support.endpoint import EndpointRecorder, Reply
from tests.support.kafka import create_topic, produce
from tests.support.wait import until, until_async
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration

BOUND = 2000


class Stats:
    """librdkafka's per-partition count of messages it received from the broker."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.received: dict[int, int] = {}

    def __call__(self, raw: str) -> None:
        parts = json.loads(raw)["topics"].get(self.topic, {}).get("partitions", {})
        for p, v in parts.items():
            if int(p) >= 0:
                self.received[int(p)] = v["rxmsgs"]


def fetcher(bootstrap: str, stats: Stats, on_batch: Callable[[Fetcher, Batch], None]) -> Fetcher:
    """A fetcher taking batches that fit between the hold and ``BOUND``, as the engine sizes them."""
    config = {"bootstrap.servers": bootstrap, "statistics.interval.ms": 100, "stats_cb": stats}
    return Fetcher(config, f"test-{secrets.token_hex(3)}", on_batch, batch_size=consume_batch(BOUND))


def test_a_partition_draining_slower_than_its_fetch_is_fetched_once(kafka_bootstrap: str) -> None:
    """20,000 records drained 50 at a time: the partition holds and opens again ~20 times, is never
    paused, and librdkafka receives each record once (a pause would make it fetch again what it had
    queued: over 100,000 receipts for these records, measured)."""
    topic, n = f"hold-{secrets.token_hex(3)}", 20_000
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, ((None, b"x" * 100, 0) for _ in range(n)))
    stats = Stats(topic)
    seen: list[int] = []
    gates: list[Gate] = []

    async def main() -> None:
        buffer: list[int] = []
        gate = Gate.OPEN

        def regate(f: Fetcher) -> None:
            nonlocal gate
            new = next_gate(gate, len(buffer), 0, BOUND, 1 << 40)
            if new is not gate:
                gate = new
                gates.append(new)
                f.gate((topic, 0), new)

        def on_batch(f: Fetcher, batch: Batch) -> None:
            buffer.extend(r.offset for r in batch.records.get((topic, 0), []))
            regate(f)

        f = fetcher(kafka_bootstrap, stats, on_batch)
        f.assign((topic, 0), 0)
        f.start(asyncio.get_running_loop())
        try:
            deadline = time.monotonic() + 60
            while len(seen) < n:
                assert time.monotonic() < deadline, f"{len(seen)} of {n} records drained in 60 s"
                await asyncio.sleep(0.001)
                seen.extend(buffer[:50])
                del buffer[:50]
                regate(f)
            await until_async(lambda: stats.received.get(0, 0) >= n, 10, "librdkafka to count every record")
        finally:
            await asyncio.to_thread(f.stop)

    asyncio.run(main())
    assert seen == list(range(n))
    assert Gate.HELD in gates
    assert Gate.PAUSED not in gates, "the thread ran more than one batch ahead of the loop"
    assert stats.received[0] == n


def test_every_partition_holding_stops_the_consumer_until_one_opens(kafka_bootstrap: str) -> None:
    topic, per_partition = f"hold-{secrets.token_hex(3)}", 3000
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, ((None, b"x" * 100, i % 2) for i in range(2 * per_partition)))
    stats = Stats(topic)
    got: dict[int, list[int]] = {0: [], 1: []}

    async def main() -> None:
        def on_batch(f: Fetcher, batch: Batch) -> None:
            for (_, p), records in batch.records.items():
                got[p].extend(r.offset for r in records)

        f = fetcher(kafka_bootstrap, stats, on_batch)
        for p in (0, 1):
            f.assign((topic, p), 0)
            f.gate((topic, p), Gate.HELD)  # queued before the thread starts: applied before any consume()
        f.start(asyncio.get_running_loop())
        try:
            await until_async(lambda: f.held_waits >= 5, 10, "the thread to wait on its held partitions")
            assert got == {0: [], 1: []}, "consumed while every partition held"

            # One partition opens: the consumer runs again, and the held one receives records too
            # (librdkafka has one queue per consumer); paused, it receives no more.
            f.gate((topic, 0), Gate.OPEN)
            await until_async(lambda: len(got[0]) == per_partition, 20, "partition 0 to be consumed")
            f.gate((topic, 1), Gate.PAUSED)
            held_at = len(got[1])
            waits = f.held_waits
            f.gate((topic, 0), Gate.HELD)
            await until_async(lambda: f.held_waits >= waits + 5, 10, "the thread to wait again")
            assert len(got[1]) <= held_at + 500, "more than the batch under way arrived after the pause"

            f.gate((topic, 1), Gate.OPEN)
            await until_async(lambda: len(got[1]) == per_partition, 20, "partition 1 to be consumed after its resume")
        finally:
            await asyncio.to_thread(f.stop)

    asyncio.run(main())
    assert got == {0: list(range(per_partition)), 1: list(range(per_partition))}


def test_a_stuck_subscription_is_paused_and_does_not_hold_up_another(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    """Two subscriptions on one worker share its consumer. One endpoint stops answering: its
    partition holds, keeps receiving while the other subscription is consumed, and is paused at its
    bound. The other subscription's records all arrive meanwhile."""
    stuck_topic, flowing_topic = f"stuck-{secrets.token_hex(3)}", f"flowing-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, stuck_topic, 1)
    create_topic(kafka_bootstrap, flowing_topic, 2)
    produce(kafka_bootstrap, stuck_topic, ((None, f"s{i}".encode(), 0) for i in range(5_000)))
    n = 10_000
    produce(kafka_bootstrap, flowing_topic, ((None, f"f{i}".encode(), i % 2) for i in range(n)))
    endpoint.script = lambda r: Reply(200, delay_s=15) if r.path == "/stuck" else Reply(200)
    base = f"http://{endpoint.host}:{endpoint.port}"
    subs = [
        {"name": "stuck", "topics": [stuck_topic], "endpoint": {"url": f"{base}/stuck", "timeout_ms": 60_000}},
        {"name": "flowing", "topics": [flowing_topic], "endpoint": {"url": f"{base}/flowing"}, "max_in_flight": 64},
    ]
    env = {"FERRY_PREFETCH_RECORDS": "200", "FERRY_DRAIN_TIMEOUT_MS": "1000"}
    w = static_worker(tmp_path, "w-stuck", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", subs, env=env)
    w.start()
    try:
        w.wait_ready(30)
        endpoint.wait_for(
            lambda rs: len({r.ce_id for r in rs if r.path == "/flowing"}) >= n, timeout_s=60, what=f"{n} records"
        )
        until(
            lambda: 'subscription="stuck"' in paused_line(w.metrics()), timeout_s=10, what="the stuck partition paused"
        )
        stuck = next(p for p in w.stats() if p["subscription"] == "stuck")
        # At most its bound plus the batch under way when it was paused, besides its pushes.
        assert stuck["buffered"] <= 200 + 500, stuck
        assert stuck["fetch"] == "paused", stuck
    finally:
        w.stop()


def paused_line(metrics: str) -> str:
    return "\n".join(
        line for line in metrics.splitlines() if line.startswith("ferry_fetch_gates_total{") and 'gate="paused"' in line
    )


def test_partitions_share_the_worker_record_budget(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    """Four partitions behind an endpoint that does not answer, a budget of 800 records and a
    per-partition cap far above it: each partition fetches its share, 200, and holds there
    (5/8 of it), not the 2,000 records it has. The records are there before the worker starts:
    the share counts the partitions it is assigned, not only those taken so far, so the first one
    taken does not fill the whole budget."""
    topic, partitions, per_partition = f"budget-{secrets.token_hex(3)}", 4, 2_000
    create_topic(kafka_bootstrap, topic, partitions)
    endpoint.script = lambda r: Reply(200, delay_s=15)
    sub = {
        "name": "budget",
        "topics": [topic],
        "endpoint": {"url": f"http://{endpoint.host}:{endpoint.port}/", "timeout_ms": 60_000},
        "max_in_flight": 1,
        "start_from": "earliest",
    }
    env = {
        "FERRY_PREFETCH_BUDGET_RECORDS": "800",
        "FERRY_PREFETCH_RECORDS": "100000",
        "FERRY_DRAIN_TIMEOUT_MS": "1000",
    }
    produce(
        kafka_bootstrap, topic, ((None, f"r{i}".encode(), i % partitions) for i in range(partitions * per_partition))
    )
    w = static_worker(tmp_path, "w-budget", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub], env=env)
    w.start()
    try:
        w.wait_ready(30)

        def filled() -> bool:
            parts = w.stats()
            return len(parts) == partitions and all(
                p["fetch"] in ("held", "paused") and p["buffered"] >= 200 * 5 // 8 for p in parts
            )

        until(filled, timeout_s=30, what="every partition holding at its share")
        for p in w.stats():
            # Its share plus at most one fetch batch (3/8 of the share) that came while it held.
            assert p["buffered"] <= 200 + 75, p
    finally:
        w.stop()
