"""The naive delay baseline of bench/delay.py: one consumer reads every scheduled record in order
and sleeps until each is due before writing it to its target — what a team writes by hand when
Kafka has no delayed delivery. A record due soon waits behind one due later that came first.

    python3 -m bench._naive_delay BOOTSTRAP INPUT_TOPIC COUNT

Reads ``COUNT`` records of ``INPUT_TOPIC`` (headers ``ferry-deliver-at`` / ``ferry-target-topic``,
as for Ferry) from the beginning, then exits.
"""

from __future__ import annotations

import sys
import time
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


def main(bootstrap: str, topic: str, count: int) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"naive-delay-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
    done = 0
    idle_since = time.monotonic()
    while done < count and time.monotonic() - idle_since < 120:
        m = c.poll(0.5)
        if m is None or m.error() is not None:
            continue
        idle_since = time.monotonic()
        headers = {k: v or b"" for k, v in cast(list[tuple[str, bytes | None]], m.headers() or [])}
        due = int(headers["ferry-deliver-at"])
        wait = due / 1000 - time.time()
        if wait > 0:
            time.sleep(wait)
        while True:
            try:
                p.produce(headers["ferry-target-topic"].decode(), m.value(), m.key(), headers=m.headers())
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        done += 1
    p.flush(30)
    c.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
