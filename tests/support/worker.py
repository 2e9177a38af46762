"""Run a real worker process (``ferry worker --assignment FILE``) against the test services."""

from __future__ import annotations

import contextlib
import json
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferry.devstack import embedded
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce


class WorkerProcess(embedded.ServiceProcess):
    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stats(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as resp:
            return list(json.load(resp)["partitions"])

    def endpoints(self) -> dict[str, Any]:
        """The adaptive limits per endpoint origin (``/stats`` ``endpoints``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as resp:
            return dict(json.load(resp)["endpoints"])

    def internal(self) -> dict[str, Any]:
        """The delay store's and the back-check runner's figures (``/stats`` ``internal``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as resp:
            return dict(json.load(resp)["internal"])

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())


def static_worker(
    tmp: Path,
    name: str,
    bootstrap: str,
    offsets_topic: str,
    subscriptions: list[dict[str, Any]],
    partitions: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    doc: dict[str, Any] = {"subscriptions": subscriptions}
    if partitions is not None:
        doc["partitions"] = partitions
    path = tmp / f"{name}-assignment.json"
    path.write_text(json.dumps(doc))
    port = embedded.free_port()
    return WorkerProcess(
        name,
        [*embedded.python_module(name, [], tmp / "x", {}).argv, "worker", "--assignment", str(path)],
        port,
        tmp / f"{name}.log",
        env={
            "FERRY_KAFKA_BOOTSTRAP": bootstrap,
            "FERRY_OFFSETS_TOPIC": offsets_topic,
            "FERRY_WORKER_ID": name,
            "FERRY_WORKER_METRICS_PORT": str(port),
            "FERRY_OFFSET_FLUSH_INTERVAL_MS": "200",
            "FERRY_LOG_FORMAT": "text",
            **(env or {}),
        },
    )


@contextlib.contextmanager
def delivering_worker(
    tmp: Path, name: str, bootstrap: str, env: dict[str, str], records: int = 10
) -> Iterator[tuple[WorkerProcess, str, str]]:
    """A static worker for subscription ``name`` on a new one-partition topic, started and past
    its first ``records`` records pushed to a recording endpoint: (the worker, the topic, its offsets topic). The
    worker is stopped (and the endpoint closed) when the block ends."""
    topic, offsets_topic = f"{name}-{secrets.token_hex(3)}", f"__offsets-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, 1)
    with EndpointRecorder() as endpoint:
        sub = {"name": name, "topics": [topic], "endpoint": {"url": endpoint.url}}
        w = static_worker(tmp, f"w-{name}", bootstrap, offsets_topic, [sub], env=env)
        w.start()
        try:
            w.wait_ready(30)
            produce(bootstrap, topic, ((f"k{i}".encode(), b"v", 0) for i in range(records)))
            endpoint.wait_for(
                lambda rs: len({r.ce_id for r in rs}) >= records, timeout_s=30, what=f"{records} records pushed"
            )
            yield w, topic, offsets_topic
        finally:
            w.stop()
