"""Durable retries (worker/durable_retry.py): what a deferred record carries, how attempts count on
across copies, and the partition runner in virtual time handing a failing record to the delay store
instead of holding it — its partition's watermark moves on at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ferry import delay
from ferry.clock import now_ms
from ferry.errors import ValidationError
from ferry.portal.api_ops import fold_sources
from ferry.portal.trace_op import retrying_of
from ferry.subscription import SOURCE_CLUSTER_HEADER, PartitionRef, Subscription, parse
from ferry.trace import Live
from ferry.worker import durable_retry
from ferry.worker.context import Context, Lease
from ferry.worker.deadletter import dead_letter_headers
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.partition import RETRYING_KEPT_MS, PartitionRunner
from ferry.worker.producer import ProduceFailed
from ferry.worker.push import BatchPushResult, Record, cloudevent_headers
from tests.support.vtime import run
from tests.unit.test_runner import DeadLetters, Endpoint

DURABLE = {
    "name": "s",
    "topics": ["t"],
    "endpoint": {"url": "http://e/hook"},
    "ordering": "none",
    "retry": {"mode": "durable", "max_attempts": 3, "initial_backoff_ms": 1000, "max_backoff_ms": 8000},
}


# --- the subscription field -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ordering": "key"}, "need ordering 'none'"),
        ({"ordering": "partition"}, "need ordering 'none'"),
        ({"batch": {}}, "single-record push"),
        ({"retry": {"mode": "disk"}}, "'memory' or 'durable'"),
    ],
)
def test_durable_is_refused_where_it_cannot_hold(change: dict[str, Any], message: str) -> None:
    doc = {**DURABLE, **change}
    if "ordering" not in change and "retry" not in change:
        doc["ordering"] = "none"
    if "retry" in change:
        doc["ordering"] = "none"
    with pytest.raises(ValidationError) as err:
        parse(doc)
    assert err.value.field == "retry.mode" and message in str(err.value)


def test_the_document_shows_the_mode_only_when_durable() -> None:
    sub = parse(DURABLE)
    assert sub.retry.mode == "durable" and sub.to_doc()["retry"]["mode"] == "durable"
    assert parse(sub.to_doc(mask_secrets=False)) == sub
    plain = parse({**DURABLE, "ordering": "key", "retry": {"max_attempts": 3}})
    assert plain.retry.mode == "memory" and "mode" not in plain.to_doc()["retry"]
    assert parse({**DURABLE, "retry": {"mode": "memory"}}).retry.mode == "memory"


# --- headers ----------------------------------------------------------------------------------


def rec(topic: str, offset: int, headers: list[tuple[str, bytes | None]], timestamp_ms: int = 0) -> Record:
    return Record(topic, 2, offset, b"k", b"v", headers, timestamp_ms)


FIRST = rec("t", 7, [("app", b"1"), ("ferry-deliver-at", b"99"), ("content-type", b"text/plain")], 1_700_000_000_123)
"""A record as first read; its own ``ferry-deliver-at`` (the delay store delivered it) is its own."""


def test_a_deferred_copy_is_ferrys_block_then_the_records_own_headers() -> None:
    headers = durable_retry.deferred_headers(FIRST, "s.retry", 1, 5000)
    assert headers == [
        ("ferry-retry-attempts", b"1"),
        ("ferry-deliver-at", b"5000"),
        ("ferry-target-topic", b"s.retry"),
        ("ferry-source-topic", b"t"),
        ("ferry-source-partition", b"2"),
        ("ferry-source-offset", b"7"),
        ("ferry-source-timestamp", b"1700000000123"),
        *FIRST.headers,
    ]
    # The delay store reads the first ferry-deliver-at / ferry-target-topic: the block's.
    assert delay.parse_schedule(headers) == delay.Schedule(5000, "s.retry")
    other = durable_retry.deferred_headers(FIRST, "s.retry", 1, 5000, "dc2")
    assert other[6:8] == [("ferry-source-cluster", b"dc2"), ("ferry-source-timestamp", b"1700000000123")]


def copy_of(first: Record, attempts: int, cluster: str = "default", offset: int = 0) -> Record:
    """What the retry topic holds after the delay store delivered a deferred copy."""
    headers = durable_retry.deferred_headers(first, "s.retry", attempts, 5000, cluster)
    return Record("s.retry", 0, offset, first.key, first.value, headers, 1_800_000_000_000)


REDRIVEN = rec(
    "s.retry",
    4,
    [
        ("app", b"1"),
        ("ferry-error", b"endpoint answered 500"),
        ("ferry-attempts", b"3"),
        ("ferry-source-topic", b"t"),
        ("ferry-source-partition", b"2"),
        ("ferry-source-offset", b"7"),
        ("ferry-source-timestamp", b"1700000000123"),
        ("ferry-redriven-from", b"0/12"),
    ],
    1_800_000_000_000,
)
OLD_COPY = rec(  # a copy deferred before the block: own headers first, Ferry's after them
    "s.retry",
    5,
    [
        ("app", b"1"),
        ("ferry-source-topic", b"t"),
        ("ferry-source-partition", b"2"),
        ("ferry-source-offset", b"7"),
        ("ferry-retry-attempts", b"2"),
        ("ferry-deliver-at", b"123"),
        ("ferry-target-topic", b"s.retry"),
    ],
    1_800_000_000_000,
)


@pytest.mark.parametrize(
    ("record", "first", "cluster", "attempts_before"),
    [
        # A durable retry: exactly the first read, its own headers byte for byte.
        (copy_of(FIRST, 1), FIRST, "default", 1),
        (copy_of(FIRST, 2, "dc2"), FIRST, "dc2", 2),
        # Deferred again: the block is replaced, never doubled, and the own headers stay.
        (copy_of(durable_retry.original(copy_of(FIRST, 1)).record, 2), FIRST, "default", 2),
        # A redriven dead letter: Ferry's headers go wherever they are; attempts start over.
        (REDRIVEN, rec("t", 7, [("app", b"1")], 1_700_000_000_123), "default", 0),
        # A copy written before the block: no timestamp kept, the copy's own stands in.
        (OLD_COPY, rec("t", 7, [("app", b"1")], 1_800_000_000_000), "default", 2),
        # Without readable ferry-source-*: it keeps its place, Ferry's headers still go.
        (
            rec("s.retry", 4, [("ferry-retry-attempts", b"x"), ("app", b"1")], 5),
            rec("s.retry", 4, [("app", b"1")], 5),
            "default",
            0,
        ),
        (
            rec("s.retry", 4, [("ferry-source-topic", b"t"), ("ferry-source-offset", b"7")], 5),
            rec("s.retry", 4, [], 5),
            "default",
            0,
        ),
    ],
)
def test_a_retry_topics_record_is_pushed_as_first_read(
    record: Record, first: Record, cluster: str, attempts_before: int
) -> None:
    assert durable_retry.original(record) == (first, cluster)
    assert durable_retry.prior_attempts(record) == attempts_before


def test_a_retried_push_has_the_first_pushs_headers_but_the_attempt() -> None:
    first_push = cloudevent_headers(FIRST, "c", "s", 1)
    assert first_push["ce-id"] == "t/2/7" and first_push["ce-time"] == "2023-11-14T22:13:20.123Z"
    assert first_push["ferry-deliver-at"] == "99" and first_push["app"] == "1"
    for copy in (copy_of(FIRST, 1), copy_of(FIRST, 4, offset=9)):
        again = cloudevent_headers(durable_retry.original(copy).record, "c", "s", 2)
        assert again == {**first_push, "ce-ferryattempt": "2"}


def test_a_dead_letter_of_a_retried_copy_names_the_first_read_and_drops_the_routing() -> None:
    first = durable_retry.original(copy_of(FIRST, 2)).record
    headers = dead_letter_headers(first, "HTTP 503", 3)
    assert headers == [
        ("app", b"1"),
        ("content-type", b"text/plain"),
        ("ferry-error", b"HTTP 503"),
        ("ferry-attempts", b"3"),
        ("ferry-source-topic", b"t"),
        ("ferry-source-partition", b"2"),
        ("ferry-source-offset", b"7"),
        ("ferry-source-timestamp", b"1700000000123"),
    ]


# --- the runner in virtual time -----------------------------------------------------------------


@dataclass
class Store:
    """Stands in for the delay store: keeps what was deferred (or refuses it)."""

    refuse: bool = False
    sent: list[tuple[float, int, int, int]] = field(default_factory=list)  # (t, offset, attempts, due in ms from t)
    copies: list[Record] = field(default_factory=list)

    async def send(
        self, sub: Subscription, record: Record, attempts: int, due_ms: int, kafka_cluster: str = "default"
    ) -> None:
        if self.refuse:
            raise ProduceFailed("broker down")
        import time

        self.sent.append((asyncio.get_running_loop().time(), record.offset, attempts, due_ms - int(time.time() * 1000)))
        headers = durable_retry.deferred_headers(record, sub.retry_topic, attempts, due_ms, kafka_cluster)
        self.copies.append(Record(sub.retry_topic, 0, len(self.copies), record.key, record.value, headers, 0))


@dataclass
class Sinks:
    """Stand-ins for each other Kafka cluster's dead-letter sink, as the engine lends them."""

    sinks: dict[str, DeadLetters] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def lend(self, name: str) -> AsyncIterator[DeadLetters]:
        yield self.sinks.setdefault(name, DeadLetters())


def durable_run(
    keys: list[str],
    script: dict[str, list[int]],
    store: Store,
    rounds: int = 1,
    kafka_cluster: str = "default",
    sinks: Sinks | None = None,
) -> dict[str, Any]:
    """Feed the records (of a partition in ``kafka_cluster``); then, ``rounds`` times, feed the
    retry topic's runner (in ``default``) what was deferred (as the delay store would deliver it)."""
    sub = parse(DURABLE)
    endpoint, dead = Endpoint(script), DeadLetters()
    out: dict[str, Any] = {"endpoint": endpoint, "dead": dead}

    async def settle(runner: PartitionRunner, n: int) -> None:
        for _ in range(2000):
            await asyncio.sleep(0.05)
            if runner.merge is not None and runner.merge.committed == n and not runner._tasks:
                return

    async def main() -> None:
        ctx = Context("w1", endpoint, dead, WorkerMetrics(), Lease(), 10_000, 1 << 30, deferrals=store)  # type: ignore[arg-type]
        if sinks is not None:
            ctx.dead_letters_in = sinks.lend  # type: ignore[assignment]
        runner = PartitionRunner(PartitionRef("s", "t", 0, kafka_cluster), sub, 1, ctx, None, lambda _: None)
        runner.feed([Record("t", 0, i, k.encode(), b"v", [], 0) for i, k in enumerate(keys)], len(keys), None)
        await settle(runner, len(keys))
        out["committed"] = runner.merge.committed if runner.merge else None
        out["source"] = (runner.delivered, runner.deferred, runner.retried)
        out["source_retrying"] = runner.stats().get("retrying")
        retry = PartitionRunner(PartitionRef("s", "s.retry", 0), sub, 1, ctx, None, lambda _: None)
        fed = 0
        for _ in range(rounds):
            batch = store.copies[fed:]
            retry.feed(batch, fed + len(batch), None)
            fed += len(batch)
            await settle(retry, fed)
        out["retry"] = (retry.delivered, retry.deferred, retry.dead_lettered)
        out["by_source"] = retry.by_source
        out["retry_retrying"] = retry.retrying
        out["retry_stats"] = retry.stats()

    run(main())
    return out


def test_a_failing_record_leaves_the_window_and_counts_on_in_the_retry_topic() -> None:
    store = Store()
    out = durable_run(["a", "b", "c"], {"b": [503, 503]}, store, rounds=2)
    endpoint: Endpoint = out["endpoint"]
    # The source partition is done at once: b was handed over, not held.
    assert out["committed"] == 3 and out["source"] == (2, 1, 0)
    # The record trace finds b waiting for its retry, where it was first read (t/0/1).
    [waiting] = out["source_retrying"]
    assert waiting[:7] == ["t", 0, 1, "default", "waiting_retry", 1, 503] and waiting[8] > 0
    # Delivered: the retry topic's runner says it is done (that word outranks the wait above).
    [(where, (state, attempts, *_))] = out["retry_retrying"].items()
    assert (where, state, attempts) == (("t", 0, 1, "default"), "done", 3)
    # b: attempt 1 failed → deferred with 1 attempt; attempt 2 (from the retry topic) failed →
    # deferred with 2; attempt 3 delivered. Each wait is the policy's back-off (≤ its cap).
    # Both copies name where b was first read: t/0/1.
    assert [(o, a) for _, o, a, _ in store.sent] == [(1, 1), (1, 2)]
    assert all(0 <= due <= cap for (_, _, _, due), cap in zip(store.sent, (1000, 2000), strict=True))
    b = [(topic_offset, attempt) for _, k, topic_offset, attempt in endpoint.pushes if k == "b"]
    assert b == [(1, 1), (1, 2), (1, 3)]  # every push of b as first read: offset 1 of t
    assert out["retry"] == (1, 1, 0) and out["dead"].sent == []
    # The retry topic's counts, by where the records were first read: [delivered, retried,
    # dead_lettered, deferred] (the status shows them on that partition's row).
    assert out["by_source"] == {("t", 0, "default"): [1, 2, 0, 1]}
    assert out["retry_stats"]["sources"] == [["t", 0, "default", 1, 2, 0, 1]]


def test_attempts_run_out_across_copies_then_dead_letter() -> None:
    store = Store()
    out = durable_run(["x"], {"x": [503] * 10}, store, rounds=2)
    assert [a for _, _, a, _ in store.sent] == [1, 2]
    assert out["dead"].sent[0][0::2] == (0, 3)  # t/0/0's dead letter; max_attempts 3, in all
    assert out["retry"] == (0, 1, 1)
    assert out["by_source"] == {("t", 0, "default"): [0, 2, 1, 1]}


def test_when_the_delay_store_refuses_the_record_waits_in_memory() -> None:
    store = Store(refuse=True)
    out = durable_run(["x"], {"x": [503, 503]}, store, rounds=0)
    assert store.sent == [] and out["committed"] == 1
    assert [a for _, k, _, a in out["endpoint"].pushes] == [1, 2, 3] and out["source"] == (1, 0, 2)


# --- records of another Kafka cluster (docs/zones.md) ------------------------------------------


def test_a_retried_copy_of_another_clusters_record_keeps_its_cluster_and_dead_letters_there() -> None:
    """dc2's record waits in the retry topic of ``default``: its copy says dc2, so it is pushed
    with ``ce-kafkacluster: dc2`` (not taken for default's record of the same id) and its dead
    letter goes to dc2's dead-letter topic, not to default's."""
    store, sinks = Store(), Sinks()
    out = durable_run(["x"], {"x": [503] * 10}, store, rounds=2, kafka_cluster="dc2", sinks=sinks)
    assert [dict(c.headers)[SOURCE_CLUSTER_HEADER] for c in store.copies] == [b"dc2", b"dc2"]
    assert out["endpoint"].kafka_clusters == ["dc2", "dc2", "dc2"]
    assert out["dead"].sent == []  # nothing in default's dead-letter topic
    assert [a for _, _, a in sinks.sinks["dc2"].sent] == [3] and sinks.sinks["dc2"].kafka_clusters == ["dc2"]
    assert out["by_source"] == {("t", 0, "dc2"): [0, 2, 1, 1]}  # shown on dc2's row of t/0


def test_the_default_clusters_copies_look_as_before() -> None:
    store, sinks = Store(), Sinks()
    out = durable_run(["x"], {"x": [503] * 10}, store, rounds=2, sinks=sinks)
    assert all(SOURCE_CLUSTER_HEADER not in dict(c.headers) for c in store.copies)
    assert out["endpoint"].kafka_clusters == ["default"] * 3
    assert [a for _, _, a in out["dead"].sent] == [3] and sinks.sinks == {}


@pytest.mark.parametrize(
    ("value", "cluster"),
    [
        (b"dc2", "dc2"),
        (None, "default"),
        (b"", "default"),
        (b"DC2\r\nx-evil: 1", "default"),  # never reaches an endpoint as a header
        (b"\xff", "default"),
    ],
)
def test_the_source_cluster_of_a_copy(value: bytes | None, cluster: str) -> None:
    headers = [] if value is None else [(SOURCE_CLUSTER_HEADER, value)]
    assert durable_retry.source_cluster(rec("s.retry", 0, headers)) == cluster


def test_a_dead_letter_names_a_cluster_other_than_default_once() -> None:
    copy = rec("s.retry", 0, [(SOURCE_CLUSTER_HEADER, b"dc2"), ("app", b"1")])
    headers = dead_letter_headers(copy, "HTTP 400", 1, None, "dc2")
    assert [v for k, v in headers if k == SOURCE_CLUSTER_HEADER] == [b"dc2"]
    assert SOURCE_CLUSTER_HEADER not in dict(dead_letter_headers(rec("t", 0, []), "HTTP 400", 1))


# --- the status ------------------------------------------------------------------------------


def row(
    topic: str, partition: int, delivered: int, retried: int, dead: int, cluster: str = "default"
) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "cluster": cluster,
        "delivered": delivered,
        "retried": retried,
        "dead_lettered": dead,
        "deferred": 0,
    }


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        # Counts of records first read in t/0 and t/1 move to those rows.
        (
            [["t", 0, "default", 1, 2, 0, 1], ["t", 1, "default", 0, 2, 1, 1]],
            [(6, 2, 0, 1), (0, 2, 1, 1), (0, 0, 0, 0)],
        ),
        # A source without a row here (topic no longer subscribed, other cluster) stays put.
        ([["gone", 0, "default", 1, 2, 0, 0], ["t", 0, "dc2", 1, 2, 0, 0]], [(5, 0, 0, 0), (0, 0, 0, 0), (1, 4, 1, 2)]),
        # Malformed entries are ignored.
        ([["t"], ["t", "x", "default", 1, 1, 1, 1], None], [(5, 0, 0, 0), (0, 0, 0, 0), (1, 4, 1, 2)]),
    ],
)
def test_the_status_shows_a_retry_topics_counts_on_the_rows_first_read(
    sources: list[Any], expected: list[tuple[int, int, int, int]]
) -> None:
    rows = [row("t", 0, 5, 0, 0), row("t", 1, 0, 0, 0), row("s.retry", 0, 1, 4, 1)]
    rows[2]["deferred"] = 2
    fold_sources(rows, [(rows[2], e) for e in sources])
    assert [(r["delivered"], r["retried"], r["dead_lettered"], r["deferred"]) for r in rows] == expected


def test_another_clusters_counts_go_to_that_clusters_row() -> None:
    """A dc2 record retried through the retry topic (in default) is counted on dc2's row of its
    partition, not on default's row of the same topic and partition."""
    rows = [row("t", 0, 5, 0, 0), row("t", 0, 0, 0, 0, "dc2"), row("s.retry", 0, 1, 4, 1)]
    rows[2]["deferred"] = 2
    fold_sources(rows, [(rows[2], ["t", 0, "dc2", 1, 2, 0, 1])])
    assert [(r["delivered"], r["retried"], r["dead_lettered"], r["deferred"]) for r in rows] == [
        (5, 0, 0, 0),
        (1, 2, 0, 1),
        (0, 2, 1, 1),
    ]


# --- the record trace -------------------------------------------------------------------------


def test_the_trace_takes_the_latest_word_on_a_retried_record() -> None:
    waits = [["t", 0, 7, "default", "waiting_retry", 1, 503, None, 5000]]  # where it was deferred
    pushing = [
        ["t", 0, 7, "default", "in_flight", 2, 503, None, None],
        ["t", 0, 8, "default", "in_flight", 2, None, None, None],
    ]
    every = {
        PartitionRef("s", "t", 0): {"worker": "w1", "retrying": waits},
        PartitionRef("s", "s.retry", 0): {"worker": "w2", "retrying": pushing},
        PartitionRef("other", "t", 0): {"worker": "w3", "retrying": [[*pushing[0][:5], 9, 503, None, None]]},
    }
    live, worker = retrying_of(every, PartitionRef("s", "t", 0), 7)
    assert (live, worker) == (Live("in_flight", 2, 503, None, None), "w2")
    assert retrying_of(every, PartitionRef("s", "t", 0), 9) == (None, None)
    assert retrying_of(every, PartitionRef("s", "t", 0, "dc2"), 7) == (None, None)
    # dc2's record at the same place, retried through the retry topic (in default), is dc2's.
    every[PartitionRef("s", "s.retry", 0)]["retrying"].append(["t", 0, 7, "dc2", "in_flight", 3, 500, None, None])
    assert retrying_of(every, PartitionRef("s", "t", 0, "dc2"), 7) == (Live("in_flight", 3, 500, None, None), "w2")
    assert retrying_of(every, PartitionRef("s", "t", 0), 7) == (Live("in_flight", 2, 503, None, None), "w2")
    # Once its due time passed and before the retry topic's owner fetched it, the wait is the word.
    del every[PartitionRef("s", "s.retry", 0)]
    assert retrying_of(every, PartitionRef("s", "t", 0), 7) == (Live("waiting_retry", 1, 503, None, 5000), "w1")
    # The retry's end outranks the wait it followed: the offset state and dead letters decide.
    every[PartitionRef("s", "s.retry", 1)] = {
        "worker": "w2",
        "retrying": [["t", 0, 7, "default", "done", 2, None, None, 9]],
    }
    assert retrying_of(every, PartitionRef("s", "t", 0), 7) == (None, None)
    # A later deferral (a wait after push 2) outranks an end of push 1 only by its attempts.
    every[PartitionRef("s", "t", 0)]["retrying"] = [["t", 0, 7, "default", "waiting_retry", 3, 500, None, 9000]]
    assert retrying_of(every, PartitionRef("s", "t", 0), 7) == (Live("waiting_retry", 3, 500, None, 9000), "w1")


def test_a_partition_shows_a_due_wait_until_the_retry_can_have_been_fetched() -> None:
    """Between a durable retry's due time and its fetch from the retry topic, the partition where it
    was deferred still says it waits; that word, and the end of a retry, go after a minute."""
    sub = parse(DURABLE)
    ctx = Context("w1", Endpoint({}), DeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
    runner = PartitionRunner(PartitionRef("s", "t", 0), sub, 1, ctx, None, lambda _: None)
    now, kept = now_ms(), RETRYING_KEPT_MS
    runner.retrying = {
        ("t", 0, 1, "default"): ("waiting_retry", 1, 503, None, now - 1000),  # due a second ago
        ("t", 0, 2, "default"): ("waiting_retry", 1, 503, None, now - kept - 1000),  # due long ago
        ("t", 0, 3, "default"): ("done", 2, None, None, now - 1000),
        ("t", 0, 4, "default"): ("done", 2, None, None, now - kept - 1000),
        ("t", 0, 5, "default"): ("in_flight", 2, 503, None, None),
    }
    shown = {entry[2]: entry[4] for entry in runner.stats()["retrying"]}
    assert shown == {1: "waiting_retry", 3: "done", 5: "in_flight"}


# --- redriven dead letters in batch mode ----------------------------------------------------------


def test_a_batch_sends_redriven_records_as_first_read() -> None:
    events: list[dict[str, Any]] = []

    class Batches(Endpoint):
        async def push_batch(self, sub: Subscription, body: bytes, read_body: int) -> Any:
            events.extend(json.loads(body))
            return BatchPushResult(
                200,
                body=b'{"results": ['
                + b",".join(b'{"id": "%s", "status": 200}' % e["id"].encode() for e in json.loads(body))
                + b"]}",
            )

    sub = parse({**DURABLE, "retry": {"max_attempts": 3}, "batch": {"max_records": 8}})
    dc2 = [(k, b"8" if k == "ferry-source-offset" else v) for k, v in REDRIVEN.headers if k != "ferry-redriven-from"]
    dc2.append((SOURCE_CLUSTER_HEADER, b"dc2"))
    copies = [
        REDRIVEN,
        Record("s.retry", 0, 5, b"k", b"w", [("app", b"2")], 1_800_000_000_000),
        REDRIVEN._replace(headers=dc2),  # a dead letter of dc2's record t/2/8, redriven
    ]

    async def main() -> PartitionRunner:
        ctx = Context("w1", Batches({}), DeadLetters(), WorkerMetrics(), Lease(), 10_000, 1 << 30)  # type: ignore[arg-type]
        retry = PartitionRunner(PartitionRef("s", "s.retry", 0), sub, 1, ctx, None, lambda _: None)
        retry.feed([r._replace(partition=0, offset=i) for i, r in enumerate(copies)], len(copies), None)
        for _ in range(200):
            await asyncio.sleep(0.05)
            if retry.merge is not None and retry.merge.committed == len(copies) and not retry._tasks:
                break
        return retry

    retry = run(main())
    assert retry.merge is not None and retry.merge.committed == 3 and retry.delivered == 3
    first = {k: events[0][k] for k in ("id", "kafkatopic", "kafkapartition", "kafkaoffset", "time", "ferryattempt")}
    assert first == {
        "id": "t/2/7",
        "kafkatopic": "t",
        "kafkapartition": 2,
        "kafkaoffset": 7,
        "time": "2023-11-14T22:13:20.123Z",
        "ferryattempt": 1,
    }
    assert events[0]["app"] == "1"
    assert [k for k in events[0] if k.startswith("ferry")] == ["ferryattempt"]  # no ferry-* header
    # Without ferry-source-*: its own place in the retry topic.
    assert (events[1]["id"], events[1]["kafkatopic"]) == ("s.retry/0/1", "s.retry")
    # dc2's record says so; default's records do not.
    assert (events[2]["id"], events[2]["kafkatopic"], events[2]["kafkacluster"]) == ("t/2/8", "t", "dc2")
    assert "kafkacluster" not in events[0] and "kafkacluster" not in events[1]
    assert [k for k in events[2] if k.startswith("ferry")] == ["ferryattempt"]
