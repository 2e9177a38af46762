"""Batch push mode: a real worker process, the broker and a real endpoint that reads the batches."""

from __future__ import annotations

import json
import random
import secrets
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferry import kafka
from ferry.subscription import PartitionRef
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration
JSON = [("content-type", b"application/json")]


@dataclass
class Event:
    id: str
    partition: int
    offset: int
    key: str | None
    attempt: int
    data: Any
    status: int  # what the endpoint answered for it
    seq: int  # receipt order


class BatchLog:
    """Explodes each batch request into its events and answers per record with ``status_of``."""

    def __init__(self, status_of: Any = None, whole: Any = None) -> None:
        self.events: list[Event] = []
        self.batches: list[list[dict[str, Any]]] = []
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        self._status_of = status_of
        self._whole = whole

    def __call__(self, req: Received) -> Reply:
        events = json.loads(req.body)
        status_whole = self._whole(events) if self._whole else 200
        statuses = [self._status_of(e) if self._status_of and status_whole == 200 else status_whole for e in events]
        with self._lock:
            self.content_types.add(req.headers.get("content-type", ""))
            self.batches.append(events)
            for e, s in zip(events, statuses, strict=True):
                self.events.append(
                    Event(
                        e["id"],
                        e["kafkapartition"],
                        e["kafkaoffset"],
                        e.get("partitionkey"),
                        e["ferryattempt"],
                        e.get("data"),
                        s,
                        len(self.events),
                    )
                )
        if status_whole != 200:
            return Reply(status_whole)
        if self._status_of is None:
            return Reply(200)
        results = [{"id": e["id"], "status": s} for e, s in zip(events, statuses, strict=True)]
        return Reply(207, headers={"Content-Type": "application/json"}, body=json.dumps({"results": results}).encode())

    def acked_ids(self) -> set[str]:
        with self._lock:
            return {e.id for e in self.events if 200 <= e.status < 300}

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)


def last_success_in_key_order(events: list[Event]) -> None:
    """The last successful delivery of each record comes in offset order per key: no record of a key
    counted done before an earlier record of that key that failed."""
    last: dict[str, Event] = {}
    for e in events:
        if 200 <= e.status < 300:
            last[e.id] = e
    by_key: dict[tuple[int, str | None], list[Event]] = defaultdict(list)
    for e in sorted(last.values(), key=lambda e: e.seq):
        by_key[(e.partition, e.key)].append(e)
    for key, evs in by_key.items():
        offs = [e.offset for e in evs]
        assert offs == sorted(offs), f"key {key}: records done out of order {offs[:20]}"


def first_delivery_in_key_order(events: list[Event]) -> None:
    seen: set[str] = set()
    by_key: dict[tuple[int, str | None], list[int]] = defaultdict(list)
    for e in events:
        if e.id not in seen:
            seen.add(e.id)
            by_key[(e.partition, e.key)].append(e.offset)
    for key, offs in by_key.items():
        assert offs == sorted(offs), f"key {key} first delivered out of order: {offs[:20]}"


def setup(kafka_bootstrap: str, name: str, parts: int, n: int, keys: int, value: Any = None) -> tuple[str, str]:
    topic, offsets_topic = f"{name}-{secrets.token_hex(3)}", f"__offsets-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, parts)
    make = value or (lambda i: json.dumps({"i": i}).encode())
    produce(
        kafka_bootstrap, topic, ((f"k{i % keys}".encode(), make(i), (i % keys) % parts) for i in range(n)), headers=JSON
    )
    return topic, offsets_topic


def test_key_order_across_concurrent_batches_and_commit(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic, offsets_topic = setup(kafka_bootstrap, "border", 4, 4000, 40)
    log = BatchLog()
    rng = random.Random(7)

    def slow(req: Received) -> Reply:
        reply = log(req)
        reply.delay_s = rng.choice((0, 0, 0.002, 0.01))  # batches of a partition finish out of order
        return reply

    endpoint.script = slow
    sub = {
        "name": "border",
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "max_in_flight": 200,
        "batch": {"max_records": 25},
    }
    w = static_worker(tmp_path, "wb1", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: len(log.acked_ids()) >= 4000, timeout_s=60, what="every record")
        events = log.snapshot()
        first_delivery_in_key_order(events)
        assert log.content_types == {"application/cloudevents-batch+json"}
        assert max(len(b) for b in log.batches) <= 25
        assert any(len({e.get("partitionkey") for e in b}) < len(b) for b in log.batches), "no key twice in a batch"
        assert {e.data["i"] for e in events} == set(range(4000))  # JSON values arrive as data
        until(
            lambda: all(
                (s := offset_states(kafka_bootstrap, offsets_topic).get(PartitionRef("border", topic, p)))
                and s.committed == 1000
                for p in range(4)
            ),
            timeout_s=30,
            what="committed reaches the end of every partition",
        )
        stats = w.stats()
        assert sum(s["delivered"] for s in stats) == 4000
        assert sum(s["retried"] for s in stats) == 0
        assert 'ferry_records_delivered_total{subscription="border"} 4000.0' in w.metrics()
    finally:
        w.stop()


def test_partial_failure_retries_only_failed_records_in_key_order(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    n = 1500
    topic, offsets_topic = setup(kafka_bootstrap, "bpart", 3, n, 30)
    # Every 7th record fails its first push; the rest of each batch is answered 200.
    log = BatchLog(status_of=lambda e: 500 if e["kafkaoffset"] % 7 == 3 and e["ferryattempt"] == 1 else 200)
    endpoint.script = log
    sub = {
        "name": "bpart",
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "max_in_flight": 100,
        "retry": {"max_attempts": 3, "initial_backoff_ms": 10, "max_backoff_ms": 50},
        "batch": {"max_records": 20},
    }
    w = static_worker(tmp_path, "wb2", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: len(log.acked_ids()) >= n, timeout_s=60, what="every record acknowledged")
        until(lambda: sum(s["delivered"] for s in w.stats()) == n, timeout_s=30, what="delivered == n")
        events = log.snapshot()
        last_success_in_key_order(events)
        failed = {e.id for e in events if e.status == 500}
        assert failed and all(e.attempt == 1 for e in events if e.status == 500)
        retried_ok = {e.id for e in events if e.status == 200 and e.attempt == 2}
        assert failed <= retried_ok  # each failed record pushed again with ferryattempt 2
        stats = w.stats()
        assert sum(s["dead_lettered"] for s in stats) == 0
        assert sum(s["retried"] for s in stats) == sum(1 for e in events if e.attempt > 1)
    finally:
        w.stop()


@pytest.mark.parametrize("ordering", ["partition", "none"])
def test_partition_and_none_orderings_with_failures(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder, ordering: str
) -> None:
    """The other two orderings through a real worker: every record acknowledged once retries are
    done, offsets committed to the end; ``partition`` keeps one batch in flight per partition, so
    its records are done in offset order per partition; ``none`` fills its batches."""
    n, parts = 2000, 2
    name = f"b{ordering}"
    topic, offsets_topic = setup(kafka_bootstrap, name, parts, n, 20)
    rng = random.Random(11)
    log = BatchLog(status_of=lambda e: 503 if e["kafkaoffset"] % 11 == 5 and e["ferryattempt"] == 1 else 200)

    def jittered(req: Received) -> Reply:
        reply = log(req)
        reply.delay_s = rng.choice((0, 0, 0.003))  # batches of a partition finish out of order
        return reply

    endpoint.script = jittered
    sub = {
        "name": name,
        "topics": [topic],
        "ordering": ordering,
        "endpoint": {"url": endpoint.url},
        "max_in_flight": 200,
        "retry": {"max_attempts": 3, "initial_backoff_ms": 10, "max_backoff_ms": 50},
        "batch": {"max_records": 40},
    }
    w = static_worker(tmp_path, f"wb-{ordering}", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: len(log.acked_ids()) >= n, timeout_s=60, what="every record acknowledged")
        events = log.snapshot()
        assert {e.data["i"] for e in events} == set(range(n))
        assert any(e.status == 503 for e in events)
        assert max(len(b) for b in log.batches) == 40  # batches fill while records wait
        if ordering == "partition":
            by_partition = [Event(**{**e.__dict__, "key": None}) for e in events]
            last_success_in_key_order(by_partition)  # one lane per partition
        until(
            lambda: all(
                (s := offset_states(kafka_bootstrap, offsets_topic).get(PartitionRef(name, topic, p)))
                and s.committed == n // parts
                for p in range(parts)
            ),
            timeout_s=30,
            what="committed reaches the end of every partition",
        )
        stats = w.stats()
        assert sum(s["delivered"] for s in stats) == n
        assert sum(s["dead_lettered"] for s in stats) == 0
    finally:
        w.stop()


def test_poison_record_dead_lettered_rest_of_batch_acknowledged(tmp_path: Path, kafka_bootstrap: str) -> None:
    n = 600
    topic, offsets_topic = setup(
        kafka_bootstrap, "bpoison", 2, n, 20, value=lambda i: b'"poison"' if i in (101, 402) else b'{"ok": 1}'
    )
    # Endpoint 1 answers per record (400 for the poison); endpoint 2 rejects a whole batch holding
    # one (400, no per-record body), so Ferry bisects it down to the poison record.
    log1 = BatchLog(status_of=lambda e: 400 if e["data"] == "poison" else 200)
    log2 = BatchLog(whole=lambda evs: 400 if any(e["data"] == "poison" for e in evs) else 200)
    with EndpointRecorder() as ep1, EndpointRecorder() as ep2:
        ep1.script, ep2.script = log1, log2
        subs = [
            {"name": name, "topics": [topic], "endpoint": {"url": ep.url}, "batch": {"max_records": 50}}
            for name, ep in (("bpoison1", ep1), ("bpoison2", ep2))
        ]
        w = static_worker(tmp_path, "wb3", kafka_bootstrap, offsets_topic, subs).start()
        try:
            w.wait_ready(30)
            for name in ("bpoison1", "bpoison2"):
                until(
                    lambda name=name: (
                        sum(s["delivered"] + s["dead_lettered"] for s in w.stats() if s["subscription"] == name) == n
                    ),
                    timeout_s=60,
                    what=f"{name}: every record settled",
                )
            for name, log in (("bpoison1", log1), ("bpoison2", log2)):
                stats = [s for s in w.stats() if s["subscription"] == name]
                assert sum(s["dead_lettered"] for s in stats) == 2, name
                assert sum(s["delivered"] for s in stats) == n - 2, name
                assert len(log.acked_ids()) == n - 2
        finally:
            w.stop()
    for name in ("bpoison1", "bpoison2"):
        dlq: list[tuple[bytes, dict[str, bytes]]] = []
        kafka.read_to_end(
            {"bootstrap.servers": kafka_bootstrap},
            f"{name}.dlq",
            lambda m, dlq=dlq: dlq.append((m.value(), dict(m.headers()))),  # type: ignore[misc]
        )
        assert sorted(v for v, _ in dlq) == [b'"poison"', b'"poison"']
        assert all(h["ferry-error"].startswith(b"endpoint answered 400") for _, h in dlq)


def test_413_splits_the_batch(tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder) -> None:
    n = 500
    topic, offsets_topic = setup(kafka_bootstrap, "b413", 2, n, 50)
    log = BatchLog(whole=lambda evs: 413 if len(evs) > 12 else 200)
    endpoint.script = log
    sub = {"name": "b413", "topics": [topic], "endpoint": {"url": endpoint.url}, "batch": {"max_records": 100}}
    w = static_worker(tmp_path, "wb4", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: sum(s["delivered"] for s in w.stats()) == n, timeout_s=60, what="every record delivered")
        assert len(log.acked_ids()) == n
        assert sum(s["dead_lettered"] for s in w.stats()) == 0
        assert any(len(b) > 12 for b in log.batches)  # it did try bigger batches
        # a refused size is not tried again: per partition, the refused sizes only go down (100, 50, 25, 13)
        for p in (0, 1):
            refused = [len(b) for b in log.batches if len(b) > 12 and b[0]["kafkapartition"] == p]
            assert refused == sorted(set(refused), reverse=True), refused
        first_delivery_in_key_order([e for e in log.snapshot() if e.status == 200])
    finally:
        w.stop()
    assert "batch.split" in w.log_tail()


def test_kill_9_mid_way_loses_nothing(tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder) -> None:
    n, parts = 3000, 3
    topic, offsets_topic = setup(kafka_bootstrap, "bcrash", parts, n, 60)
    log = BatchLog()

    def slow(req: Received) -> Reply:
        reply = log(req)
        reply.delay_s = 0.02
        return reply

    endpoint.script = slow
    sub = {
        "name": "bcrash",
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "max_in_flight": 40,
        "batch": {"max_records": 20},
    }
    w = static_worker(tmp_path, "wb5", kafka_bootstrap, offsets_topic, [sub]).start()
    w.wait_ready(30)
    until(lambda: len(log.acked_ids()) >= n // 3, timeout_s=60, what="a third of the records")
    w.kill()
    time.sleep(0.1)  # answers to requests already sent may still land: they do not count
    restored = offset_states(kafka_bootstrap, offsets_topic)
    assert len(log.acked_ids()) < n, "the worker finished before it was killed; make the run longer"
    w2 = static_worker(tmp_path, "wb6", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w2.wait_ready(30)
        until(lambda: len(log.acked_ids()) >= n, timeout_s=60, what="every record after the restart")
    finally:
        w2.stop()
    events = log.snapshot()
    assert {e.id for e in events} == {f"{topic}/{i % 60 % parts}/{o}" for i, o in _offsets(n, 60, parts)}
    counts = Counter(e.id for e in events)
    for cid, c in counts.items():
        _, p, off = cid.rsplit("/", 2)
        state = restored.get(PartitionRef("bcrash", topic, int(p)))
        if c > 1:
            assert state is None or not state.is_acked(int(off)), f"{cid} was acknowledged yet redelivered"
    first_delivery_in_key_order(events)


def _offsets(n: int, keys: int, parts: int) -> list[tuple[int, int]]:
    """(record index, offset in its partition) as produced by :func:`setup`."""
    next_offset: Counter[int] = Counter()
    out = []
    for i in range(n):
        p = (i % keys) % parts
        out.append((i, next_offset[p]))
        next_offset[p] += 1
    return out


def test_two_redriven_copies_of_one_record_never_share_a_batch(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    # A dead letter redriven, dead-lettered again and redriven again: two records of the retry
    # topic with the same first-read place, so the same event id. In one batch the endpoint's
    # per-record results named that id twice and Ferry took the answer as malformed (retried,
    # then dead-lettered, although every record was answered 200).
    topic, offsets_topic = f"bdup-{secrets.token_hex(3)}", f"__offsets-{secrets.token_hex(3)}"
    name = f"bdup{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, f"{name}.retry", 1)
    dead_letter = [
        ("x-own", b"1"),
        ("ferry-error", b"endpoint answered 500"),
        ("ferry-attempts", b"2"),
        ("ferry-source-topic", topic.encode()),
        ("ferry-source-partition", b"0"),
        ("ferry-source-offset", b"5"),
        ("ferry-source-timestamp", b"1700000000000"),
    ]
    for dl_offset in (0, 1, 2):  # the third: another record, so a batch of three ids, one repeated
        headers = [*dead_letter, ("ferry-redriven-from", f"0/{dl_offset}".encode())]
        if dl_offset == 2:
            headers = [(k, b"6" if k == "ferry-source-offset" else v) for k, v in headers]
        produce(kafka_bootstrap, f"{name}.retry", [(b"k", b'{"n": 1}', 0)], headers=headers)
    log = BatchLog(status_of=lambda e: 200)
    endpoint.script = log
    sub = {
        "name": name,
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "batch": {"max_records": 10},
        "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "max_backoff_ms": 50},
    }
    parts = [{"subscription": name, "topic": f"{name}.retry", "partition": 0}]
    w = static_worker(tmp_path, "wbdup", kafka_bootstrap, offsets_topic, [sub], partitions=parts).start()
    try:
        w.wait_ready(30)
        stats = until(
            lambda: [s for s in w.stats() if s["delivered"] + s["dead_lettered"] == 3] or None,
            timeout_s=60,
            what="the three redriven records settled",
        )
        assert stats[0]["dead_lettered"] == 0 and stats[0]["delivered"] == 3
    finally:
        w.stop()
    for events in log.batches:
        ids = [e["id"] for e in events]
        assert len(ids) == len(set(ids)), ids
    assert sorted(e.id for e in log.snapshot()) == [f"{topic}/0/5", f"{topic}/0/5", f"{topic}/0/6"]
    assert all(e.attempt == 1 for e in log.snapshot())
