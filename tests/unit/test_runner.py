"""The partition runner in process, in virtual time: a scripted endpoint ("key k answers 503, 503,
200") and records fed as a fetch would → the order of pushes, the attempts, the dead letters, and
the watermark the offset merge reaches. No broker, no sockets: seconds of back-off run in
milliseconds (tests/support/vtime.py), and each table row fails when the runner's ordering, acking
or watermark is broken (``python -m tests.support.mutate`` shows it for a few mutations)."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from ferry.subscription import PartitionRef, Subscription, parse
from ferry.worker.backpressure import Gate
from ferry.worker.context import Context, Lease
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.partition import PartitionRunner
from ferry.worker.push import PushResult, Record
from tests.support.vtime import run

LATENCY_S = 0.010


@dataclass
class Endpoint:
    """Answers per record (``"key@offset"``) or per key, in attempt order (then 200); records
    every push with its virtual time."""

    script: dict[str, list[int]]
    pushes: list[tuple[float, str, int, int]] = field(default_factory=list)  # (t, key, offset, attempt)
    kafka_clusters: list[str] = field(default_factory=list)
    """Each push's ``ce-kafkacluster`` (``default``: none), in push order."""

    cluster = "default"

    async def push(self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str = "default") -> PushResult:
        key = (record.key or b"").decode()
        self.pushes.append((asyncio.get_running_loop().time(), key, record.offset, attempt))
        self.kafka_clusters.append(kafka_cluster)
        await asyncio.sleep(LATENCY_S)
        answers = self.script.get(f"{key}@{record.offset}", self.script.get(key, []))
        status = answers[attempt - 1] if attempt <= len(answers) else 200
        return PushResult(status)


@dataclass
class DeadLetters:
    sent: list[tuple[int, str, int]] = field(default_factory=list)  # (offset, reason, attempts)
    kafka_clusters: list[str] = field(default_factory=list)
    """The cluster each dead letter names as its record's (``ferry-source-cluster``)."""

    async def send(
        self, topic: str, record: Record, error: str, attempts: int, source: Any = None, kafka_cluster: str = "default"
    ) -> None:
        self.sent.append((record.offset, error, attempts))
        self.kafka_clusters.append(kafka_cluster)


def scenario(
    keys: list[str], script: dict[str, list[int]], **sub_fields: Any
) -> tuple[Endpoint, DeadLetters, PartitionRunner]:
    endpoint, dead, runner = run_with(Endpoint(script), keys, sub_fields)
    return endpoint, dead, runner


def run_with(endpoint: Any, keys: list[str], sub_fields: dict[str, Any]) -> tuple[Any, DeadLetters, PartitionRunner]:
    """A runner of subscription ``s`` (4 attempts, 1-8 s back-off, ``sub_fields`` on top) pushing
    to ``endpoint``, fed one record per key, run in virtual time until every record is settled."""
    doc = {
        "name": "s",
        "topics": ["t"],
        "endpoint": {"url": "http://e/hook"},
        "retry": {"max_attempts": 4, "initial_backoff_ms": 1000, "max_backoff_ms": 8000},
        **sub_fields,
    }
    sub = parse(doc)
    dead = DeadLetters()

    async def main() -> PartitionRunner:
        ctx = Context("w1", endpoint, dead, WorkerMetrics(), Lease(), 10_000, 1 << 30)
        runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, lambda _: None)
        runner.feed([Record("t", 0, i, k.encode(), b"v", [], 0) for i, k in enumerate(keys)], len(keys), None)
        for _ in range(10_000):  # bounded: until every record is settled
            await asyncio.sleep(0.05)
            if runner.merge is not None and runner.merge.committed == len(keys) and not runner._tasks:
                break
        return runner

    return endpoint, dead, run(main())


def first_push_order(endpoint: Endpoint, key: str) -> list[int]:
    return [o for _, k, o, a in endpoint.pushes if k == key and a == 1]


def test_per_key_order_holds_through_retries() -> None:
    # key a: 503, 503, then 200 — b never waits for a; a's later records wait for a's first.
    endpoint, dead, runner = scenario(["a", "b", "a", "b", "a"], {"a@0": [503, 503]})
    assert runner.merge is not None and runner.merge.committed == 5
    a_pushes = [(o, att) for _, k, o, att in endpoint.pushes if k == "a"]
    assert a_pushes == [(0, 1), (0, 2), (0, 3), (2, 1), (4, 1)]  # nothing of a overtakes offset 0
    b_first = next(t for t, k, o, a in endpoint.pushes if k == "b" and o == 1)
    a_retry = next(t for t, k, o, a in endpoint.pushes if k == "a" and a == 2)
    assert b_first < a_retry  # b was not held by a's retries
    assert runner.delivered == 5 and runner.retried == 2 and dead.sent == []


def test_back_off_follows_the_policy() -> None:
    endpoint, _, _ = scenario(["a"], {"a": [503, 503, 503]})
    times = [t for t, *_ in endpoint.pushes]
    gaps = [round(b - a - LATENCY_S, 3) for a, b in itertools.pairwise(times)]
    # Full jitter under a cap that doubles from 1 s: each wait within its cap, and not all (near) zero.
    assert len(times) == 4 and all(0 <= g <= cap for g, cap in zip(gaps, (1, 2, 4), strict=True))
    assert sum(gaps) > 0.05


def test_a_permanent_error_dead_letters_and_still_acks() -> None:
    _endpoint, dead, runner = scenario(["x", "ok", "x"], {"x@0": [422]})
    assert [(o, a) for o, _, a in dead.sent] == [(0, 1)]
    assert "422" in dead.sent[0][1]
    assert runner.merge is not None and runner.merge.committed == 3
    assert runner.dead_lettered == 1 and runner.delivered == 2


def test_retries_run_out_then_dead_letter() -> None:
    _, dead, runner = scenario(["x"], {"x": [503] * 10})
    assert [(o, a) for o, _, a in dead.sent] == [(0, 4)]  # max_attempts 4
    assert runner.merge is not None and runner.merge.committed == 1


@pytest.mark.parametrize(("ordering", "blocked_behind"), [("partition", True), ("none", False)])
def test_partition_ordering_holds_everything_none_holds_nothing(ordering: str, blocked_behind: bool) -> None:
    endpoint, _, runner = scenario(["a", "b"], {"a": [503]}, ordering=ordering)
    b_first = next(t for t, k, o, a in endpoint.pushes if k == "b")
    a_retry = next(t for t, k, o, a in endpoint.pushes if k == "a" and a == 2)
    assert (b_first > a_retry) is blocked_behind
    assert runner.merge is not None and runner.merge.committed == 2


def test_the_watermark_waits_for_the_oldest_unacknowledged_record() -> None:
    holder: dict[str, Any] = {}

    async def main() -> None:
        endpoint = Endpoint({"slow": [503, 503, 503]})
        ctx = Context("w1", endpoint, DeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
        sub = parse(
            {"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/h"}, "retry": {"initial_backoff_ms": 1000}}
        )
        runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, lambda _: None)
        runner.feed([Record("t", 0, i, k.encode(), b"v", [], 0) for i, k in enumerate(["slow", "a", "b"])], 3, None)
        await asyncio.sleep(0.5)  # a and b are done; slow waits for its retry
        assert runner.merge is not None
        holder["mid"] = (runner.merge.committed, list(runner.merge.acked))
        await asyncio.sleep(60)
        holder["end"] = runner.merge.committed

    run(main())
    assert holder["mid"] == (0, [(1, 3)])  # acked out of order: committed stays at the slow record
    assert holder["end"] == 3


def test_a_filter_acknowledges_without_pushing() -> None:
    endpoint, _, runner = scenario(["eu", "us", "eu"], {}, filter={"exact": {"partitionkey": "eu"}})
    assert [k for _, k, _, _ in endpoint.pushes] == ["eu", "eu"]
    assert runner.filtered == 1 and runner.merge is not None and runner.merge.committed == 3


def test_a_filter_on_the_contiguous_fetch_path_acknowledges_and_counts() -> None:
    # The first fetch goes record by record (no offsets known yet); the next ones, contiguous,
    # are split by the filter in one pass: rejected records are acknowledged, erring ones counted.
    doc = {"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/hook"}}
    sub = parse({**doc, "filter": {"sql": "partitionkey LIKE 'eu%' AND INT(region) > 0"}})
    endpoint = Endpoint({})

    async def main() -> PartitionRunner:
        ctx = Context("w1", endpoint, DeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
        runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, lambda _: None)
        keys = ["eu", "us", "eu-2", "us", "eu", "eu"]
        regions = [b"1", b"1", b"1", b"1", b"x", b"2"]  # offset 4's region is no Integer: an error
        records = [
            Record("t", 0, i, k.encode(), b"v", [("region", r)], 0)
            for i, (k, r) in enumerate(zip(keys, regions, strict=True))
        ]
        runner.feed(records[:2], None, None)
        runner.feed(records[2:], None, None)
        for _ in range(1000):
            await asyncio.sleep(0.05)
            if runner.merge is not None and runner.merge.committed == 6 and not runner._tasks:
                break
        return runner

    runner = run(main())
    assert runner.merge is not None and runner.merge.committed == 6
    assert runner.filtered == 3 and runner.admission.errors == 1 and runner.delivered == 3


def test_delay_ms_holds_each_record_until_its_time_plus_the_delay() -> None:
    # Records stamped "now" (time.time() at build) wait delay_ms before their first push.
    import time as _time

    now_ms = int(_time.time() * 1000)
    sub = parse({"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/h"}, "delay_ms": 3000})
    endpoint = Endpoint({})
    holder: dict[str, Any] = {}

    async def main() -> None:
        ctx = Context("w1", endpoint, DeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
        runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, lambda _: None)
        runner.feed([Record("t", 0, 0, b"k", b"v", [], now_ms)], 1, None)
        await asyncio.sleep(1.0)
        holder["early"] = list(endpoint.pushes)
        holder["live"] = dict(runner.live)
        await asyncio.sleep(5.0)
        holder["done"] = runner.merge.committed if runner.merge else None

    run(main())
    assert holder["early"] == [] and holder["live"][0][0] == "waiting_retry"
    assert holder["done"] == 1 and len(endpoint.pushes) == 1


def test_records_held_until_due_start_on_time_and_hold_no_slot_meanwhile() -> None:
    """A partition whose client says when each record may start (a delay level, a consumer
    delay): records wait in the buffer, not in flight, and each starts at its time."""
    epoch = 1_800_000_000.0
    holder: dict[str, Any] = {}

    class Held(Endpoint):
        def hold_until(self, sub: Subscription, topic: str, partition: int) -> Any:
            return lambda r: r.timestamp_ms + 5_000

    async def main() -> None:
        loop = asyncio.get_running_loop()
        endpoint = Held({})
        ctx = Context("w1", endpoint, DeadLetters(), WorkerMetrics(), Lease(), 50, 1 << 30)  # type: ignore[arg-type]
        ctx.wall_clock = lambda: epoch + loop.time()  # the virtual clock
        sub = parse({"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/h"}, "ordering": "none"})
        gates: list[Gate] = []
        runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, gates.append)
        # 200 records stamped 10 ms apart, the first now: each may start 5 s after its stamp.
        base_ms = int(epoch * 1000)
        runner.feed([Record("t", 0, i, b"k", b"v", [], base_ms + 10 * i) for i in range(200)], 200, None)
        await asyncio.sleep(4.9)
        holder["early"] = (len(endpoint.pushes), runner.window.in_flight, list(gates))
        most = 0
        for _ in range(400):
            await asyncio.sleep(0.01)
            most = max(most, runner.window.in_flight)
        await asyncio.sleep(1)
        holder["most_in_flight"] = most
        holder["committed"] = runner.merge.committed if runner.merge else None
        # Each record started no earlier than its time (virtual seconds from the first stamp).
        holder["late_ms"] = [round((t - (5.0 + 0.01 * o)) * 1000, 3) for t, _, o, _ in endpoint.pushes]

    run(main())
    assert holder["early"] == (0, 0, [Gate.PAUSED])  # nothing started, nothing in flight; the fetch paused
    assert holder["committed"] == 200 and holder["most_in_flight"] <= 3
    assert len(holder["late_ms"]) == 200 and all(0 <= ms < 1 for ms in holder["late_ms"])


# --- batch push mode: the same runner with the batch delivery --------------------------------


@dataclass
class BatchEndpoint(Endpoint):
    """Answers whole batches in call order from ``batches`` (then 200); records every event it
    received as a push ``(t, key, offset, ferryattempt)`` and every batch's size."""

    batches: list[int | None] = field(default_factory=list)  # None: the connection is refused
    sizes: list[int] = field(default_factory=list)
    tasks: list[asyncio.Task[Any] | None] = field(default_factory=list)  # the task pushing each batch

    async def push_batch(self, sub: Subscription, body: bytes, read_body: int) -> Any:
        from ferry.worker.push import BatchPushResult

        events = json.loads(body)
        now = asyncio.get_running_loop().time()
        for e in events:
            self.pushes.append((now, e.get("partitionkey", ""), e["kafkaoffset"], e["ferryattempt"]))
        call = len(self.sizes)
        self.sizes.append(len(events))
        self.tasks.append(asyncio.current_task())
        await asyncio.sleep(LATENCY_S)
        status = self.batches[call] if call < len(self.batches) else 200
        if status is None:
            return BatchPushResult(None, error="refused: connection refused")
        return BatchPushResult(status, None, b"", False)


def batch_scenario(
    keys: list[str], batches: list[int], **sub_fields: Any
) -> tuple[BatchEndpoint, DeadLetters, PartitionRunner]:
    endpoint = BatchEndpoint({}, batches=batches)
    return run_with(endpoint, keys, {"batch": {"max_records": 8}, **sub_fields})


@pytest.mark.parametrize(
    ("name", "batches", "attempts", "retried"),
    [
        ("accepted at once", [], [1], 0),
        ("503, 503, then 200: the whole batch again, attempt by attempt", [503, 503], [1, 2, 3], 16),
        ("a refused connection is retried like a 503", [None], [1, 2], 8),
        ("a 500 is retried too", [500, 503, 500], [1, 2, 3, 4], 24),
    ],
)
def test_a_batch_is_pushed_again_whole_until_accepted(
    name: str, batches: list[int | None], attempts: list[int], retried: int
) -> None:
    keys = [f"k{i % 3}" for i in range(8)]  # one batch of 8
    endpoint, dead, runner = batch_scenario(keys, batches, ordering="none")
    assert runner.merge is not None and runner.merge.committed == 8, name
    assert dead.sent == [] and runner.delivered == 8 and runner.retried == retried
    for offset in range(8):
        assert [a for _, _, o, a in endpoint.pushes if o == offset] == attempts, offset
    assert endpoint.sizes == [8] * len(attempts)


def test_attempts_run_out_for_the_whole_batch_then_each_record_is_dead_lettered() -> None:
    endpoint, dead, runner = batch_scenario([f"k{i}" for i in range(4)], [503] * 10, ordering="none")
    assert runner.merge is not None and runner.merge.committed == 4 and runner.dead_lettered == 4
    assert sorted((o, a) for o, _, a in dead.sent) == [(o, 4) for o in range(4)]
    assert endpoint.sizes == [4, 4, 4, 4]  # max_attempts 4


def test_a_batch_too_large_is_split_and_stays_smaller() -> None:
    endpoint, dead, runner = batch_scenario([f"k{i}" for i in range(8)], [413], ordering="none")
    assert runner.merge is not None and runner.merge.committed == 8
    assert endpoint.sizes == [8, 4, 4]  # halves, in order; none of them charged an attempt
    assert {a for *_, a in endpoint.pushes} == {1, 2} and dead.sent == []


def test_batches_keep_per_key_order_and_retries_hold_their_keys() -> None:
    keys = ["a", "b", "a", "c", "a", "b"] * 4  # 24 records, 3 batches of 8 may be in flight
    endpoint, dead, runner = batch_scenario(keys, [503], ordering="key")
    assert runner.merge is not None and runner.merge.committed == 24 and dead.sent == []
    for key in "abc":
        firsts = [o for _, k, o, a in endpoint.pushes if k == key and a == 1]
        assert firsts == sorted(firsts), key
        delivered = [o for _, k, o, _ in endpoint.pushes if k == key]
        # a key's record is never pushed after a later record of the same key was accepted
        assert delivered == sorted(delivered) or len(set(delivered)) < len(delivered)


@pytest.mark.parametrize("batches", [[], [503]])
def test_the_batch_an_acknowledgement_frees_is_pushed_by_the_same_task(batches: list[int | None]) -> None:
    # ordering=partition: each batch waits for the one before; the task that saw a batch through
    # pushes the next one at once instead of leaving it to a new task a turn of the loop later.
    endpoint, dead, runner = batch_scenario([f"k{i}" for i in range(24)], batches, ordering="partition")
    assert runner.merge is not None and runner.merge.committed == 24 and dead.sent == []
    assert endpoint.sizes == [8] * (3 + len(batches))
    assert len(set(map(id, endpoint.tasks))) == 1
    assert [o for _, _, o, a in endpoint.pushes if a == 1] == list(range(24))


def test_a_single_record_batch_refused_for_good_is_dead_lettered_and_acknowledged() -> None:
    _, dead, runner = batch_scenario(["only"], [400], ordering="none")
    assert runner.merge is not None and runner.merge.committed == 1
    assert [(o, a) for o, _, a in dead.sent] == [(0, 1)] and runner.dead_lettered == 1
