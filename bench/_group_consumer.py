"""Baseline for bench/handoff.py: a plain confluent-kafka consumer-group member pushing each record to
an HTTP endpoint (one at a time per partition) and committing; leaves the group cleanly on SIGTERM."""

from __future__ import annotations

import signal
import sys
import urllib.request

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, topic, group, strategy, url = sys.argv[1:6]
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": strategy,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 10,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    c.subscribe([topic])
    while running:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        req = urllib.request.Request(
            url, data=m.value() or b"", method="POST", headers={"ce-id": f"{m.topic()}/{m.partition()}/{m.offset()}"}
        )
        urllib.request.urlopen(req, timeout=10).read()
    c.close()


if __name__ == "__main__":
    main()
