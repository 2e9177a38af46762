"""What a filter costs: µs per evaluation of typical filters on a record's attributes, as the worker
evaluates them (the record's attributes computed on demand), and what a filter that passes every
record takes from a worker's throughput, one run.

    python3 -m bench.filter [--records 200000] [--worker-records 50000] [--repeat 3]

Evaluation rows: an exact match on a header, a prefix on partitionkey, a CESQL expression with
three comparisons and a function call, and the no-filter baseline (building nothing).

Worker rows: records/s of one partition runner (ferry.worker.partition) fed fetch-sized chunks of
500 and pushing to an in-process endpoint that answers 200 at once — feed, admission, window,
push bookkeeping and acknowledgement, no sockets — in single-record and in batch mode, without a
filter and with the CESQL filter above (which passes every record). Best of ``--repeat`` runs,
alternating, so a busy machine spoils both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench import _results
from ferry import filters
from ferry.filters.attributes import RecordAttributes
from ferry.subscription import PartitionRef, Subscription, parse
from ferry.worker.context import Context, Lease
from ferry.worker.http1 import Answer
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.partition import PartitionRunner
from ferry.worker.push import BatchPushResult, PushResult, Record

SQL = "region = 'eu' AND kafkapartition < 6 AND LENGTH(partitionkey) > 3 AND type <> 'x'"
FILTERS: dict[str, Any] = {
    "exact on a header": {"exact": {"region": "eu"}},
    "prefix on partitionkey": {"prefix": {"partitionkey": "customer-1"}},
    "CESQL, 3 comparisons + a function": {"sql": SQL},
    "no filter": None,
}
HEADERS = [("region", b"eu"), ("content-type", b"application/json"), ("trace-id", b"abc")]
MAX_RUN_S = 120.0  # one worker run; a stuck one ends the bench with a message


def evaluations(n: int) -> list[list[str]]:
    records = [(i % 6, i, f"customer-{i % 500}".encode()) for i in range(1000)]
    print(f"{'filter':36} {'µs/record':>10} {'passed':>8}")
    rows = []
    for name, doc in FILTERS.items():
        f = filters.parse(doc) if doc is not None else None
        view = RecordAttributes("", 0, 0, None, (), 0, "default", "s").reset  # one view, as the worker
        passed = 0
        started = time.perf_counter()
        for i in range(n):
            p, o, key = records[i % 1000]
            if f is None:
                passed += True
                continue
            ok, _ = f.matches(view("orders", p, o, key, HEADERS, 1_795_552_317_864))
            passed += ok
        us = (time.perf_counter() - started) / n * 1e6
        print(f"{name:36} {us:>10.2f} {passed:>8,}")
        rows.append([name, f"{us:.2f}"])
    return rows


class _Instant:
    """A push client whose endpoint answers 200 at once, for single records and batches."""

    cluster = "default"

    def __init__(self) -> None:
        self._pool = self

    async def push(self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str = "default") -> PushResult:
        return PushResult(200)

    async def post(self, url: str, headers: Any, body: bytes, timeout_s: float, read_body: int = 0) -> Answer:
        return Answer(200, None)

    async def push_batch(self, sub: Subscription, body: bytes, read_body: int) -> BatchPushResult:
        return BatchPushResult(200)


class _NoDeadLetters:
    async def send(self, topic: str, record: Record, error: str, attempts: int, source: Any = None) -> None:
        raise AssertionError("nothing is dead-lettered here")


async def _records_per_s(sub: Subscription, records: list[Record]) -> float:
    ctx = Context("w1", _Instant(), _NoDeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
    runner = PartitionRunner(PartitionRef(sub.name, "orders", 0), sub, 1, ctx, None, lambda: None, lambda: None)
    n = len(records)
    started = time.perf_counter()
    deadline = started + MAX_RUN_S

    async def until(done: Any) -> None:
        while not done():
            if time.perf_counter() > deadline:
                committed = runner.merge and runner.merge.committed
                raise SystemExit(f"bench.filter: no progress in {MAX_RUN_S} s (committed {committed} of {n})")
            await asyncio.sleep(0)

    for i in range(0, n, 500):
        runner.feed(records[i : i + 500], None, None)
        await until(lambda: runner.window.pending <= 2000)
    await until(lambda: runner.merge is not None and runner.merge.committed >= n)
    elapsed = time.perf_counter() - started
    assert runner.delivered == n and runner.filtered == 0
    return n / elapsed


def worker(n: int, repeat: int) -> list[list[str]]:
    value = b'{"order": 12345, "customer": "c-000042", "amount": 99.5}'
    records = [
        Record("orders", 0, i, f"customer-{i % 500}".encode(), value, HEADERS, 1_795_552_317_864) for i in range(n)
    ]
    print(f"\n{'worker, one partition':36} {'records/s':>10} {'no filter':>10} {'change':>8}")
    rows = []
    for mode, extra in (("single-record push", {}), ("batch push", {"batch": {}})):
        doc = {"name": "s", "topics": ["orders"], "endpoint": {"url": "http://e/hook"}, **extra}
        plain, filtered = parse(doc), parse({**doc, "filter": {"sql": SQL}})
        best = {"plain": 0.0, "filtered": 0.0}
        for _ in range(repeat):
            best["plain"] = max(best["plain"], asyncio.run(_records_per_s(plain, records)))
            best["filtered"] = max(best["filtered"], asyncio.run(_records_per_s(filtered, records)))
        change = best["filtered"] / best["plain"] - 1
        print(f"{mode + ', CESQL filter':36} {best['filtered']:>10,.0f} {best['plain']:>10,.0f} {change:>+8.1%}")
        rows.append([f"worker records/s, {mode}", f"{best['plain']:,.0f} → {best['filtered']:,.0f} ({change:+.0%})"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--worker-records", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"bench.filter: {args.records:,} evaluations each, on this machine\n")
    rows = evaluations(args.records) + worker(args.worker_records, args.repeat)
    _results.save(
        "filter",
        "python3 -m bench.filter",
        ["filter", "µs per record (worker rows: records/s without → with a CESQL filter)"],
        rows,
        "the worker rows push to an in-process endpoint that answers at once, so the filter's share is at its largest",
    )


if __name__ == "__main__":
    main()
