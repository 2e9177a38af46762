"""What a filter costs: µs per record of typical filters as the worker applies them to a fetch
(one generated loop per partition, ferry.filters.splitter) and as one record's view evaluates them,
and what a filter that passes every record takes from a worker's throughput, one run.

    python3 -m bench.filter [--records 200000] [--worker-records 200000] [--repeat 9]

Evaluation rows: an exact match on a header, a prefix on partitionkey, a CESQL expression with
three comparisons and a function call (on fetches whose 500 keys recur and whose records share one
headers tuple, as the fetch builds them; and again with a new key and headers tuple per record).

Worker rows: records per CPU-second of one partition runner (ferry.worker.partition) fed
fetch-sized chunks of 500 and pushing to an in-process endpoint that answers 200 at once — feed,
admission, window, push bookkeeping and acknowledgement, no sockets — in single-record and in
batch mode, without a filter and with the CESQL filter above (which passes every record), with
the worker's GC settings.
The bench process runs one thread, so its CPU time is the runner's: other processes on the machine
do not spoil it as they spoil wall time. Median of ``--repeat`` runs of each, in ABBA order after
a warm-up run; beside it, the share of the filtered runs' CPU spent in the filter's calls (the steadier
figure: the runs themselves spread by ±10 %).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from typing import Any

from bench import _results
from ferry import filters
from ferry.filters.attributes import RecordAttributes
from ferry.filters.splitter import splitter
from ferry.subscription import PartitionRef, Subscription, parse
from ferry.worker.admission import LAYOUT
from ferry.worker.context import Context, Lease
from ferry.worker.http1 import Answer
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.partition import PartitionRunner
from ferry.worker.push import BatchPushResult, PushResult, Record
from ferry.worker.service import tune_gc

SQL = "region = 'eu' AND kafkapartition < 6 AND LENGTH(partitionkey) > 3 AND type <> 'x'"
FILTERS: dict[str, Any] = {
    "exact on a header": {"exact": {"region": "eu"}},
    "prefix on partitionkey": {"prefix": {"partitionkey": "customer-1"}},
    "CESQL, 3 comparisons + a function": {"sql": SQL},
}
HEADERS = (("region", b"eu"), ("content-type", b"application/json"), ("trace-id", b"abc"))
MAX_RUN_S = 120.0  # one worker run; a stuck one ends the bench with a message


def _fetches(fresh: bool) -> list[list[Record]]:
    """Two fetches of 500 records of partition 0: 500 keys that recur, the records sharing one
    headers tuple as the fetch thread builds them; or (``fresh``) a new key and a new headers tuple
    for every record, the worst case of the worker's loop."""
    out = []
    for start in (0, 500):
        batch = []
        for i in range(start, start + 500):
            key = f"customer-{i}-{'x' * 8}".encode() if fresh else f"customer-{i % 500}".encode()
            headers = tuple(list(HEADERS)) if fresh else HEADERS
            batch.append(Record("orders", 0, i, key, b"v", headers, 1_795_552_317_864))
        out.append(batch)
    return out


def evaluations(n: int) -> list[list[str]]:
    """µs per record of the worker's loop over a fetch (ferry.filters.splitter), and of one
    evaluation on a record's view (what a record re-fed one by one, and the record trace, use)."""
    print(f"{'filter':42} {'fetch µs/record':>16} {'view µs/record':>15}")
    rows = []
    cases = [(name, doc, False) for name, doc in FILTERS.items()]
    cases.append(("CESQL, every key and header set new", {"sql": SQL}, True))
    for name, doc, fresh in cases:
        fetches = _fetches(fresh)
        f = filters.parse(doc)
        split = splitter(f, "orders", 0, "default", "s", LAYOUT)
        assert split is not None
        started = time.perf_counter()
        for i in range(n // 500):
            split(fetches[i % 2])
        fetch_us = (time.perf_counter() - started) / n * 1e6
        view = RecordAttributes("", 0, 0, None, (), 0, "default", "s").reset  # one view, reset per record
        started = time.perf_counter()
        for i in range(n // 500):
            for r in fetches[i % 2]:
                f.matches(view(r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms))
        view_us = (time.perf_counter() - started) / n * 1e6
        print(f"{name:42} {fetch_us:>16.2f} {view_us:>15.2f}")
        rows.append([name, f"{fetch_us:.2f}", f"{view_us:.2f}"])
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


async def _run(sub: Subscription, records: list[Record]) -> tuple[float, float]:
    """(records per CPU-second, the share of that CPU spent in the filter's calls)."""
    ctx = Context("w1", _Instant(), _NoDeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
    runner = PartitionRunner(PartitionRef(sub.name, "orders", 0), sub, 1, ctx, None, lambda _: None)
    split, in_filter = runner.admission.split, [0.0]

    def timed_split(batch: list[Record]) -> tuple[list[Record], list[Record]]:
        t = time.process_time()
        try:
            return split(batch)
        finally:
            in_filter[0] += time.process_time() - t

    runner.admission.split = timed_split  # type: ignore[method-assign, assignment]
    n = len(records)
    started, cpu = time.perf_counter(), time.process_time()
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
    cpu = time.process_time() - cpu
    assert runner.delivered == n and runner.filtered == 0
    return n / cpu, in_filter[0] / cpu if sub.filter is not None else 0.0


def worker(n: int, repeat: int) -> list[list[str]]:
    value = b'{"order": 12345, "customer": "c-000042", "amount": 99.5}'
    records = [
        Record("orders", 0, i, f"customer-{i % 500}".encode(), value, HEADERS, 1_795_552_317_864) for i in range(n)
    ]
    tune_gc()  # as the worker does
    print(f"\n{'worker, one partition':28} {'records/CPU-s':>14} {'no filter':>10} {'change':>8} {'in filter':>10}")
    rows = []
    modes: list[tuple[str, dict[str, Any]]] = [("single-record push", {}), ("batch push", {"batch": {}})]
    for mode, extra in modes:
        doc = {"name": "s", "topics": ["orders"], "endpoint": {"url": "http://e/hook"}, **extra}
        plain, filtered = parse(doc), parse({**doc, "filter": {"sql": SQL}})
        asyncio.run(_run(plain, records))  # warm-up: a process's first run is the slowest
        runs: dict[str, list[tuple[float, float]]] = {"plain": [], "filtered": []}
        for i in range(repeat):  # ABBA: a drift over the runs spoils neither side
            for name in ("plain", "filtered") if i % 2 == 0 else ("filtered", "plain"):
                gc.collect()
                runs[name].append(asyncio.run(_run(plain if name == "plain" else filtered, records)))
        without = statistics.median(rate for rate, _ in runs["plain"])
        with_ = statistics.median(rate for rate, _ in runs["filtered"])
        share = statistics.median(share for _, share in runs["filtered"])
        change = with_ / without - 1
        pairs = sorted(f[0] / p[0] - 1 for p, f in zip(runs["plain"], runs["filtered"], strict=True))
        spread = f"pairs {pairs[0]:+.0%} to {pairs[-1]:+.0%}"
        print(f"{mode + ', CESQL':28} {with_:>14,.0f} {without:>10,.0f} {change:>+8.1%} {share:>10.1%}  ({spread})")
        figures = f"{without:,.0f} → {with_:,.0f} ({change:+.0%}, {spread}); the filter {share:.0%} of the CPU"
        rows.append([f"worker records/CPU-s, {mode}", figures, ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--worker-records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    print(f"bench.filter: {args.records:,} evaluations each, on this machine\n")
    rows = evaluations(args.records) + worker(args.worker_records, args.repeat)
    _results.save(
        "filter",
        "python3 -m bench.filter",
        [
            "filter",
            "µs per record, a fetch (worker rows: records/CPU-s without → with a CESQL filter)",
            "µs per record, one view",
        ],
        rows,
        "the worker rows push to an in-process endpoint that answers at once, so the filter's share is at its largest",
    )


if __name__ == "__main__":
    main()
