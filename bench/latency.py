"""Record timestamp → endpoint latency at a steady rate (default: half of the worker's maximum
measured by bench/delivery.py on this machine), ordering=key.

Run: python3 bench/latency.py [--rate 4500] [--seconds 20]
The record timestamp is set by the producer when it produces (CreateTime), so the figure covers
producer batching, the broker, the worker's fetch and the push.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.delivery import http
from ferry import embedded


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=4500)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--partitions", type=int, default=12)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-latency-"))
    broker = embedded.kafka_broker(tmp).start().wait_ready(30)
    bootstrap = f"127.0.0.1:{broker.port}"
    ep_port = embedded.free_port()
    ep_proc = (
        embedded.ServiceProcess(
            "endpoint",
            [sys.executable, str(Path(__file__).parent / "_endpoint.py"), str(ep_port)],
            ep_port,
            tmp / "ep.log",
        )
        .start()
        .wait_ready(30)
    )
    ep = f"http://127.0.0.1:{ep_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("lat", a.partitions, 1)])["lat"].result(15)
    assignment = tmp / "a.json"
    sub = {"name": "lat", "topics": ["lat"], "endpoint": {"url": f"{ep}/hook"}, "ordering": "key", "max_in_flight": 32}
    assignment.write_text(json.dumps({"subscriptions": [sub]}))
    port = embedded.free_port()
    worker = (
        embedded.ServiceProcess(
            "worker",
            [sys.executable, "-m", "ferry.cli", "worker", "--assignment", str(assignment)],
            port,
            tmp / "w.log",
            env={
                "FERRY_KAFKA_BOOTSTRAP": bootstrap,
                "FERRY_WORKER_METRICS_PORT": str(port),
                "FERRY_LOG_LEVEL": "WARNING",
            },
        )
        .start()
        .wait_ready(30)
    )
    try:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        # Warm up, then measure from a clean slate.
        for i in range(200):
            p.produce("lat", key=f"k{i % 500}".encode(), value=b"x" * 100)
        p.flush(10)
        time.sleep(1)
        http("POST", f"{ep}/reset")
        n = int(a.rate * a.seconds)
        started = time.monotonic()
        for i in range(n):
            due = started + i / a.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            p.produce("lat", key=f"k{i % 500}".encode(), value=b"x" * 100)
            p.poll(0)
        p.flush(30)
        deadline = time.monotonic() + 60
        while http("GET", f"{ep}/stats")["count"] < n and time.monotonic() < deadline:
            time.sleep(0.1)
        st = http("GET", f"{ep}/stats")
        print(f"steady {a.rate:.0f} records/s for {a.seconds:.0f} s, ordering=key, {a.partitions} partitions")
        print(
            f"delivered {st['count']:,} of {n:,}; latency record timestamp -> endpoint: "
            f"p50 {st['p50_ms']:.1f} ms, p99 {st['p99_ms']:.1f} ms (goal p99 < 50 ms)"
        )
    finally:
        worker.stop()
        ep_proc.stop()
        broker.stop()


if __name__ == "__main__":
    main()
