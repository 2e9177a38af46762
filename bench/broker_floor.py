"""What the embedded broker (Tansu) costs at a steady rate before any Ferry code runs: its CPU with
the producer alone, and with one plain confluent-kafka consumer (``assign()``, Ferry's fetch
settings) reading everything as it arrives. That is the floor under bench/latency.py's steady
runs on this machine: the cores it takes are not there for the consumer and the endpoint.

Run: python3 bench/broker_floor.py [--rates 1500,3000,6000] [--seconds 10] [--partitions 12]
          [--linger-ms 5] [--fetch-wait-ms 10]

For each rate and each case, a fresh topic; the producer (this process; CreateTime, ``linger.ms``
5 by default) produces the rate for ``--seconds``, produced records every millisecond; with a
consumer, it runs in its own process (so the producer and it do not share a GIL), reads from the
beginning of every partition, and reports its fetch requests per second from librdkafka's
statistics. Printed: records/s produced, the broker's CPU in cores and in ms per 1,000 records,
the consumer's fetch requests/s, the broker's CPU per fetch request, and the p99 of
``produce()`` → the broker's acknowledgement: a latency floor that no consumer can go under,
since a record is fetchable only once it is in the log.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition

from bench._harness import Stack, cpu_seconds, create_topic, produce_steady


def consume(bootstrap: str, topic: str, partitions: int, fetch_wait_ms: int, stop: Any, out: Any) -> None:
    """Read everything as it arrives until ``stop`` is set; put its fetch requests/s on ``out``."""
    fetches: list[tuple[float, int]] = []

    def on_stats(js: str) -> None:
        for b in json.loads(js)["brokers"].values():
            if b.get("nodeid", -1) >= 0:  # the broker's connection, not the bootstrap one
                fetches.append((time.monotonic(), b["req"].get("Fetch", 0)))

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "broker-floor",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": fetch_wait_ms,
            "fetch.queue.backoff.ms": 10,
            "statistics.interval.ms": 1000,
            "stats_cb": on_stats,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while not stop.is_set():
        c.consume(500, 0.05)
    c.close()
    per_s = 0.0
    if len(fetches) >= 3:  # the first interval includes the connection's start
        (t0, f0), (t1, f1) = fetches[1], fetches[-1]
        per_s = (f1 - f0) / max(1e-6, t1 - t0)
    out.put(per_s)


def run(s: Stack, a: argparse.Namespace, rate: float, with_consumer: bool) -> dict[str, float]:
    topic = f"floor-{'c' if with_consumer else 'p'}-{rate:.0f}"
    create_topic(s.bootstrap, topic, a.partitions)
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    child = None
    if with_consumer:
        child = ctx.Process(target=consume, args=(s.bootstrap, topic, a.partitions, a.fetch_wait_ms, stop, out))
        child.start()
        time.sleep(3)  # connected and fetching before the clock starts
    p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": a.linger_ms})
    broker_pid: int = s.broker.proc.pid  # type: ignore[union-attr]
    b0 = cpu_seconds(broker_pid)
    made = produce_steady(p, topic, rate, a.seconds)
    n, took = made.n, made.seconds
    broker_s = cpu_seconds(broker_pid) - b0
    fetch_per_s = 0.0
    if child is not None:
        stop.set()
        fetch_per_s = out.get(timeout=60)
        child.join(30)
    del p
    return {
        "rate": rate,
        "produced": n / took,
        "broker_cores": broker_s / took,
        "broker_ms_per_k": broker_s * 1e6 / max(1, n),
        "fetch_per_s": fetch_per_s,
        "produce_p99_ms": made.produce_p99_ms(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="1500,3000,6000")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--fetch-wait-ms", type=int, default=10, help="the consumer's fetch.wait.max.ms (Ferry's default)")
    a = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)
    rows = []
    with Stack("ferry-bench-floor-") as s:
        for rate in (float(r) for r in a.rates.split(",") if r):
            alone = run(s, a, rate, with_consumer=False)
            read = run(s, a, rate, with_consumer=True)
            rows.append((alone, read))
            print(f"  {rate:,.0f}/s done", flush=True)
    print()
    print(
        f"{a.partitions} partitions, 100-byte values, producer linger.ms {a.linger_ms:g}; consumer: assign(), "
        f"fetch.wait.max.ms {a.fetch_wait_ms}, fetch.queue.backoff.ms 10, its own process"
    )
    cols = ["rate/s", "produced/s alone / with consumer", "broker cores: producer alone", "+ one consumer"]
    cols += ["broker ms / 1k records alone / with consumer", "fetch requests/s", "broker ms per fetch"]
    cols += ["produce p99 ms alone / with consumer"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " ---: |" * len(cols))
    for alone, read in rows:
        per_fetch = (read["broker_cores"] - alone["broker_cores"]) * 1000 / max(1e-9, read["fetch_per_s"])
        cells = [
            f"{alone['rate']:,.0f}",
            f"{alone['produced']:,.0f} / {read['produced']:,.0f}",
            f"{alone['broker_cores']:.2f}",
            f"{read['broker_cores']:.2f}",
            f"{alone['broker_ms_per_k']:.0f} / {read['broker_ms_per_k']:.0f}",
            f"{read['fetch_per_s']:.0f}",
            f"{per_fetch:.1f}",
            f"{alone['produce_p99_ms']:.1f} / {read['produce_p99_ms']:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    print("broker ms per fetch: the consumer's share of the broker's CPU divided by its fetch requests")
    print("produce p99: produce() to the broker's acknowledgement; no record is fetchable before it is in the log")


if __name__ == "__main__":
    main()
