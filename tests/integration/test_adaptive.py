"""Adaptive concurrency on a real worker against an endpoint of limited capacity: it serves 4
requests at once (20 ms each) and answers 503 beyond that. A fixed window of 64 floods it; the
adaptive limit learns it: far fewer 503s, everything delivered once, the limit and the no-queue
latency visible in the worker's stats and metrics."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ferry.devstack import embedded
from ferry.subscription import origin
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration
N = 1_500
CAPACITY = 4


class Limited:
    def __init__(self) -> None:
        self.port = embedded.free_port()
        self.busy = 0
        self.ok: set[bytes] = set()
        self.refused = 0
        self._loop = asyncio.new_event_loop()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.busy >= CAPACITY:
            self.refused += 1
            return web.Response(status=503)
        self.busy += 1
        try:
            await asyncio.sleep(0.02)
        finally:
            self.busy -= 1
        self.accept(body)
        return web.Response(status=200)

    def accept(self, body: bytes) -> None:
        self.ok.add(body)

    def __enter__(self) -> Limited:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        runner = web.AppRunner(app, access_log=None)

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            self._loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        until(lambda: embedded.port_open(self.port), timeout_s=10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture()
def limited() -> Iterator[Limited]:
    with Limited() as e:
        yield e


def run_one(
    tmp_path: Path,
    bootstrap: str,
    e: Limited,
    concurrency: dict[str, Any] | None,
    batch: dict[str, Any] | None = None,
) -> tuple[int, str]:
    topic = f"adaptive-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, ((None, f"v{i}".encode(), i % 4) for i in range(N)))
    sub: dict[str, Any] = {
        "name": "ad",
        "topics": [topic],
        "endpoint": {"url": f"http://127.0.0.1:{e.port}/hook"},
        "ordering": "none",
        "max_in_flight": 64,
        "retry": {"max_attempts": 1000, "initial_backoff_ms": 20, "max_backoff_ms": 200},
    }
    if concurrency:
        sub["concurrency"] = concurrency
    if batch:
        sub["batch"] = batch
    w = static_worker(tmp_path, f"w-{secrets.token_hex(2)}", bootstrap, f"__offsets-{topic}", [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: len(e.ok) >= N, timeout_s=120, what=f"{N} records accepted by the limited endpoint")
        return e.refused, w.metrics()
    finally:
        w.stop()


def test_adaptive_limit_learns_the_endpoint(tmp_path: Path, kafka_bootstrap: str, limited: Limited) -> None:
    fixed_refused, _ = run_one(tmp_path, kafka_bootstrap, limited, None)
    with Limited() as second:
        adaptive_refused, metrics = run_one(
            tmp_path, kafka_bootstrap, second, {"mode": "adaptive", "min": 1, "max": 64}
        )
        assert len(second.ok) == N
    assert fixed_refused > 0
    assert adaptive_refused * 3 < fixed_refused, (adaptive_refused, fixed_refused)
    assert "ferry_endpoint_concurrency_limit" in metrics and "ferry_endpoint_no_queue_latency_seconds" in metrics
    print(f"503s: fixed 64 = {fixed_refused}, adaptive = {adaptive_refused}")


class LimitedBatches(Limited):
    """The same endpoint taking batch pushes: it counts the events inside each accepted batch."""

    def accept(self, body: bytes) -> None:
        self.ok.update(e["id"].encode() for e in json.loads(body))


def test_batch_push_shares_the_adaptive_limit(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Batch push goes through the same gate: each batch POST is one push in flight there."""
    refused = {}
    for label, concurrency in (("fixed", None), ("adaptive", {"mode": "adaptive", "min": 1, "max": 64})):
        with LimitedBatches() as e:
            refused[label], _ = run_one(tmp_path, kafka_bootstrap, e, concurrency, batch={"max_records": 5})
            assert len(e.ok) == N
    assert refused["fixed"] > 0
    assert refused["adaptive"] * 3 < refused["fixed"], refused
    print(f"batch 503s: {refused}")


class Refusing(Limited):
    """An endpoint that answers 422 to everything, after 10 ms: it counts pushes and the most it
    had in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0
        self.peak = 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.busy += 1
        self.peak = max(self.peak, self.busy)
        try:
            await asyncio.sleep(0.01)
        finally:
            self.busy -= 1
        self.seen += 1
        return web.Response(status=422)


def test_an_endpoint_answering_only_errors_is_not_held_at_one_push(tmp_path: Path, kafka_bootstrap: str) -> None:
    """No 2xx answer, so no no-queue latency to learn: the errors still end the probe, and the
    records go to the dead-letter topic at the starting limit, not one at a time."""
    n = 400
    topic = f"refusing-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 4)
    produce(kafka_bootstrap, topic, ((None, f"v{i}".encode(), i % 4) for i in range(n)))
    with Refusing() as e:
        sub = {
            "name": "rf",
            "topics": [topic],
            "endpoint": {"url": f"http://127.0.0.1:{e.port}/hook"},
            "ordering": "none",
            "max_in_flight": 64,
            "concurrency": {"mode": "adaptive", "min": 1, "max": 64},
        }
        w = static_worker(tmp_path, "w-refusing", kafka_bootstrap, f"__offsets-{topic}", [sub]).start()
        try:
            w.wait_ready(30)
            until(lambda: e.seen >= n, timeout_s=60, what=f"{n} records refused by the endpoint")
            until(
                lambda: sum(p["dead_lettered"] for p in w.stats()) == n,
                timeout_s=30,
                what=f"{n} records dead-lettered",
            )
        finally:
            w.stop()
    assert e.peak >= 4, f"at most {e.peak} push(es) in flight at once"


def test_workers_pushing_to_one_endpoint_are_told_how_many_they_are(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    """The leader counts the workers holding partitions of adaptive subscriptions toward each
    origin and writes the count into their assignments; each worker's limit grows by its share."""
    cluster = Cluster(tmp_path, zk_connect, kafka_bootstrap)
    try:
        topic = f"sharing-{secrets.token_hex(3)}"
        create_topic(kafka_bootstrap, topic, 4)
        cluster.add_subscription(
            {"name": "sh", "topics": [topic], "endpoint": {"url": endpoint.url}, "concurrency": {"mode": "adaptive"}}
        )
        cluster.coordinator()
        workers = {n: cluster.worker(n) for n in ("w1", "w2")}
        until(lambda: set(cluster.assignment().values()) == set(workers), timeout_s=30, what="both workers assigned")
        at = origin(endpoint.url)

        def sharing(w: str) -> int | None:
            produce(kafka_bootstrap, topic, [(None, b"x", p) for p in range(4)])  # a gate exists once pushed
            gate = workers[w].endpoints().get(at)
            return None if gate is None else int(gate["sharing"])

        until(lambda: sharing("w1") == 2 and sharing("w2") == 2, timeout_s=30, what="each worker told: 2 share it")
        workers.pop("w2").stop(grace_s=15)
        until(lambda: sharing("w1") == 1, timeout_s=30, what="the remaining worker told: it is alone")
    finally:
        cluster.close()
