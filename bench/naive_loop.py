"""The baseline: a hand-written proxy loop (consume → one POST per record, N in flight → commit the
contiguous prefix). What a team writes without Ferry; no ordering, retries or dead letters.

As its own process (so its CPU is measured apart and it does not share a benchmark's GIL):
python3 bench/naive_loop.py --bootstrap H:P --topic T --partitions N --url U --total N
[--in-flight 128] [--timeout-s 300] [--linger-s 120] [--consume-timeout-s 0.05]: delivers
``--total`` records (or stops at the timeout), then stays idle until it is stopped (SIGTERM) or
``--linger-s`` passed, so its CPU time can be read after the last record."""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp
from confluent_kafka import Consumer, KafkaError, TopicPartition


async def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    url: str,
    total: int,
    in_flight: int = 128,
    timeout_s: float | None = None,
    consume_timeout_s: float = 0.05,
) -> float:
    """Deliver ``total`` records (or stop consuming after ``timeout_s``); returns seconds taken.
    ``consume(500, consume_timeout_s)`` returns after 500 records or the timeout, so at low rates
    every record waits up to ``consume_timeout_s`` before its push."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "naive",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    sem = asyncio.Semaphore(in_flight)
    done = 0
    acked: dict[int, set[int]] = {p: set() for p in range(partitions)}
    committed = dict.fromkeys(range(partitions), 0)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight)) as http:

        async def push(p: int, off: int, value: bytes, ts: int) -> None:
            nonlocal done
            try:
                async with http.post(url, data=value, headers={"x-id": f"{p}/{off}", "x-ts-ms": str(ts)}) as r:
                    await r.read()
            finally:
                sem.release()
            acked[p].add(off)
            while committed[p] in acked[p]:
                acked[p].discard(committed[p])
                committed[p] += 1
            done += 1

        started = time.monotonic()
        deadline = started + timeout_s if timeout_s is not None else float("inf")
        tasks: set[asyncio.Task[None]] = set()
        last_commit = started
        while done < total and time.monotonic() < deadline:
            msgs = await loop.run_in_executor(None, c.consume, 500, consume_timeout_s)
            for m in msgs:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    continue
                await sem.acquire()
                t = asyncio.create_task(push(m.partition() or 0, m.offset() or 0, m.value() or b"", m.timestamp()[1]))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if time.monotonic() - last_commit > 0.5:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=True)
                last_commit = time.monotonic()
            if not msgs:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    c.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--in-flight", type=int, default=128)
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--linger-s", type=float, default=120)
    ap.add_argument("--consume-timeout-s", type=float, default=0.05)
    a = ap.parse_args()
    secs = asyncio.run(
        run(a.bootstrap, a.topic, a.partitions, a.url, a.total, a.in_flight, a.timeout_s, a.consume_timeout_s)
    )
    print(f"naive loop: {a.total:,} records asked, {secs:.1f} s", flush=True)
    time.sleep(a.linger_s)


if __name__ == "__main__":
    main()
