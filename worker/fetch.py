"""Fetch: one confluent-kafka consumer, driven with ``assign()`` only, feeding the event loop.

Use case: the worker owns partitions chosen by the coordinator, so the consumer never joins a
consumer group (no group rebalances ever reach the endpoints). A poll thread owns the consumer:
it applies queued control operations (assign at an offset, unassign, a partition's gate) between
``consume()`` calls, so librdkafka is only ever touched by one thread, and hands each batch to
the event loop with the partition's high watermark (from the fetch response, never ListOffsets).

States of a partition here: assigned (open) ⇄ held ⇄ paused in librdkafka → unassigned
(:mod:`ferry.worker.backpressure`). While every assigned partition holds, the thread stops
consuming: librdkafka fills its bounded queue and stops fetching, and nothing it fetched is thrown
away, as a pause would.

A topic partition can be assigned once per consumer; when two subscriptions on one worker read
the same topic partition, the engine gives the second one its own :class:`Fetcher`.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ferry import kafka, log
from ferry.worker import native
from ferry.worker.backpressure import CONSUME_MAX, Gate
from ferry.worker.push import NO_HEADERS, Record

_log = log.get_logger(__name__)
TP = tuple[str, int]
Headers = tuple[tuple[str, bytes | None], ...]
_HEADER_SETS_MAX = 4096
QUEUED_MAX_KBYTES = 8 * 1024
"""librdkafka's ``queued.max.messages.kbytes`` for a fetcher unless the Kafka settings give one."""
FETCH_PARTITION_BYTES = 1024 * 1024
"""librdkafka's ``fetch.message.max.bytes`` (per partition and fetch) unless the Kafka settings give one."""
FETCH_TOTAL_BYTES = 8 * 1024 * 1024
"""librdkafka's ``fetch.max.bytes`` (per fetch) unless the Kafka settings give one."""
HOLD_WAIT_S = 0.1
"""How long the thread waits for a control operation while every partition holds."""


@dataclass
class Batch:
    records: dict[TP, list[Record]] = field(default_factory=dict)
    eof: dict[TP, int] = field(default_factory=dict)
    """Partitions that reached their end, with the end offset (the high watermark)."""
    high_watermarks: dict[TP, int] = field(default_factory=dict)


OnBatch = Callable[["Fetcher", Batch], None]
Op = tuple[str, TP, int]
"""A control operation for the poll thread: (name, partition, offset or gate)."""
Built = tuple[dict[TP, list[Record]], dict[TP, int], list[tuple[str, int, KafkaError]]]


def build_batch_py(msgs: Sequence[Message], header_sets: dict[Headers, Headers]) -> Built:
    """(records per partition, partitions at their end with the end offset, errors) of one consume().

    The reference for ``worker/_records.c``, which does the same without the interpreter.
    Per record: C accessors and one Record, nothing more (this loop bounds fetch throughput).
    """
    records: dict[TP, list[Record]] = {}
    eof: dict[TP, int] = {}
    errors: list[tuple[str, int, KafkaError]] = []
    last_topic: str | None = None
    last_p = -1
    out: list[Record] = []
    new = tuple.__new__  # Record without a Python frame (worker/push.py)
    for m in msgs:
        err = m.error()
        p = m.partition()
        if err is not None:
            where = cast(str, m.topic())
            if err.code() == KafkaError._PARTITION_EOF:
                eof[(where, cast(int, p))] = cast(int, m.offset())
            else:
                errors.append((where, cast(int, p), err))
            continue
        topic = m.topic()
        if p != last_p or topic != last_topic:
            last_topic, last_p = topic, cast(int, p)
            # Consumed messages always carry topic, partition and offset; the stubs say Optional.
            out = records.setdefault((cast(str, topic), last_p), [])
        key, value = m.key(), m.value()
        size = (len(value) if value else 0) + (len(key) if key else 0) + 64  # as Record() computes it
        raw_headers = m.headers()
        if raw_headers:
            # One shared tuple per distinct header set: records of a topic mostly carry the same
            # few, and a list per record is one more object for the collector to visit while the
            # record waits in the window.
            hkey: Headers = tuple(raw_headers)  # type: ignore[arg-type]
            headers = header_sets.get(hkey)
            if headers is None:
                if len(header_sets) >= _HEADER_SETS_MAX:
                    header_sets.clear()
                headers = header_sets[hkey] = hkey
        else:
            headers = NO_HEADERS
        out.append(new(Record, (topic, p, m.offset(), key, value, headers, m.timestamp()[1], size)))
    return records, eof, errors


def _native_build() -> Callable[[Sequence[Message], dict[Headers, Headers]], Built] | None:
    module = native.load("_records")
    if module is None:
        return None
    return functools.partial(_native_call, module.build)


def _native_call(build: Callable[..., Built], msgs: Sequence[Message], header_sets: dict[Headers, Headers]) -> Built:
    return build(msgs, Record, header_sets, NO_HEADERS, _HEADER_SETS_MAX, KafkaError._PARTITION_EOF)


build_batch = _native_build() or build_batch_py


def fetch_config(client_config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A fetcher's librdkafka settings: ``client_config`` plus what the fetch thread relies on
    (no group, no auto commit, partition EOF events) and its queue and fetch sizes where
    ``client_config`` does not set them. The benches that stand for the fetch thread use it too."""
    cfg = dict(client_config)
    cfg.update(
        {
            "group.id": cfg.get("group.id", f"ferry.fetch.{name}"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # librdkafka's 1 s default leaves the local queue empty under per-record work.
            "fetch.queue.backoff.ms": cfg.get("fetch.queue.backoff.ms", 10),
            # Bytes one fetch may bring per partition (librdkafka's 1 MB; a larger record is
            # still fetched whole) and in all (librdkafka: 50 MB). A hold or pause acts only
            # after fetches already under way arrived, so what they bring overshoots the
            # prefetch bound: the total cap keeps that to 8 MB a fetch however many partitions
            # there are (1,000 partitions × 1 MB, uncapped, took in every record whatever the
            # bound; bench/memory.py). Small per-partition fetches cost the broker more fetches
            # per record: at 64 KB it spent about half as much again per record (bench/batch.py).
            "fetch.message.max.bytes": cfg.get("fetch.message.max.bytes", FETCH_PARTITION_BYTES),
            "fetch.max.bytes": cfg.get("fetch.max.bytes", FETCH_TOTAL_BYTES),
            # What librdkafka keeps fetched ahead for this consumer (librdkafka: 64 MB). The
            # queue fills while every partition holds, so this is what a fetcher holds beyond
            # the partitions' own prefetch bounds.
            "queued.max.messages.kbytes": cfg.get("queued.max.messages.kbytes", QUEUED_MAX_KBYTES),
        }
    )
    return cfg


class Fetcher:
    def __init__(
        self, client_config: Mapping[str, Any], name: str, on_batch: OnBatch, batch_size: int = CONSUME_MAX
    ) -> None:
        cfg = fetch_config(client_config, name)
        self._cfg = cfg
        self.name = name
        self._on_batch = on_batch
        self.batch_size = batch_size
        """Records taken per consume; the engine lowers it as the partitions' record bound shrinks."""
        self._header_sets: dict[Headers, Headers] = {}
        self._build = build_batch
        self._ops: queue.SimpleQueue[Op] = queue.SimpleQueue()
        self.assigned: set[TP] = set()
        self._running = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One batch at a time on its way to the event loop: the thread consumes the next one only
        # after the loop took the last, so a partition's gate is decided at most one batch late.
        self._handed = threading.Semaphore(1)
        self.held_waits = 0
        """Times the thread waited because every partition it reads holds (read by tests)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._running = True
        self._thread = threading.Thread(target=self._run, name=f"ferry-fetch-{self.name}", daemon=True)
        self._thread.start()

    # Control, from the event loop. Bookkeeping of `assigned` happens here so the engine can
    # decide synchronously which fetcher a partition goes to.
    def assign(self, tp: TP, offset: int) -> None:
        self.assigned.add(tp)
        self._ops.put(("assign", tp, offset))

    def unassign(self, tp: TP) -> None:
        self.assigned.discard(tp)
        self._ops.put(("unassign", tp, 0))

    def gate(self, tp: TP, gate: Gate) -> None:
        """Open, hold or pause ``tp``'s fetch (:mod:`ferry.worker.backpressure`)."""
        self._ops.put(("gate", tp, int(gate)))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Blocking: the poll thread ends its current ``consume()`` and closes the consumer."""
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    # --- the poll thread -----------------------------------------------------------------

    def _apply(
        self, consumer: Consumer, live: set[TP], held: set[TP], paused: set[TP], first: Op | None = None
    ) -> None:
        """Apply ``first``, then every queued control operation, in the order they were queued."""
        while True:
            if first is not None:
                (op, tp, arg), first = first, None
            else:
                try:
                    op, tp, arg = self._ops.get_nowait()
                except queue.Empty:
                    return
            try:
                if op == "assign":
                    consumer.incremental_assign([TopicPartition(*tp, arg)])
                    live.add(tp)
                    held.discard(tp)  # a partition starts open
                elif op == "unassign" and tp in live:
                    consumer.incremental_unassign([TopicPartition(*tp)])
                    live.discard(tp)
                    held.discard(tp)
                    paused.discard(tp)
                elif op == "gate" and tp in live:
                    self._gate(consumer, tp, Gate(arg), held, paused)
            except Exception as exc:
                _log.error("fetch.control_failed", op=op, topic=tp[0], partition=tp[1], error=str(exc))

    @staticmethod
    def _gate(consumer: Consumer, tp: TP, gate: Gate, held: set[TP], paused: set[TP]) -> None:
        if gate is Gate.PAUSED and tp not in paused:
            consumer.pause([TopicPartition(*tp)])
            paused.add(tp)
        elif gate is not Gate.PAUSED and tp in paused:
            consumer.resume([TopicPartition(*tp)])
            paused.discard(tp)
        if gate is Gate.OPEN:
            held.discard(tp)
        else:
            held.add(tp)

    def _hand_over(self, batch: Batch) -> None:
        """On the event loop: the batch to the engine, then the thread may consume the next."""
        try:
            self._on_batch(self, batch)
        finally:
            self._handed.release()

    def _run(self) -> None:
        consumer = kafka.consumer(self._cfg, "fetch")
        live: set[TP] = set()
        held: set[TP] = set()  # gate HELD or PAUSED
        paused: set[TP] = set()  # paused in librdkafka
        try:
            while self._running:
                if not self._handed.acquire(timeout=HOLD_WAIT_S):
                    continue  # the loop has not taken the last batch yet
                self._apply(consumer, live, held, paused)
                if not live or len(held) >= len(live):
                    # Nothing assigned, or every partition holds: wait for a control operation.
                    self._handed.release()
                    self.held_waits += bool(live)
                    try:
                        op = self._ops.get(timeout=HOLD_WAIT_S)
                    except queue.Empty:
                        if not live:
                            consumer.poll(0)  # nothing assigned: only hands over queued log lines
                        continue
                    self._apply(consumer, live, held, paused, first=op)
                    continue
                # consume() waits out its timeout unless the batch fills: keep it short, or every
                # partial batch would add that much latency.
                msgs = consumer.consume(self.batch_size, 0.005)
                if not msgs:
                    self._handed.release()
                    continue
                records, eof, errors = self._build(msgs, self._header_sets)
                batch = Batch(records, eof)
                for topic, p, err in errors:
                    _log.warning("fetch.error", topic=topic, partition=p, error=err.str())
                for tp in batch.records:
                    hw = kafka.cached_high_watermark(consumer, *tp)
                    if hw is not None:  # a missing one only delays the lag figure
                        batch.high_watermarks[tp] = hw
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._hand_over, batch)
        except Exception as exc:
            _log.error("fetch.thread_failed", fetcher=self.name, error=str(exc), exc_info=True)
        finally:
            consumer.close()
