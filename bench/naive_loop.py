"""The baseline: a hand-written proxy loop (consume → one POST per record, N in flight → commit the
contiguous prefix). What a team writes without Ferry; no ordering, retries or dead letters."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from confluent_kafka import Consumer, KafkaError, TopicPartition


async def run(bootstrap: str, topic: str, partitions: int, url: str, total: int, in_flight: int = 128) -> float:
    """Deliver ``total`` records; returns seconds taken."""
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
        tasks: set[asyncio.Task[None]] = set()
        last_commit = started
        while done < total:
            msgs = await loop.run_in_executor(None, c.consume, 500, 0.05)
            for m in msgs:
                if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                    continue
                await sem.acquire()
                t = asyncio.create_task(push(m.partition(), m.offset(), m.value(), m.timestamp()[1]))
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
