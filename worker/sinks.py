"""Where a worker's records go: the HTTP endpoint of a subscription, or one of Ferry's own sinks.

Use case: the partition runner hands every record to ``ctx.client.push(sub, record, attempt)`` and
acks it when the answer is a success. For user subscriptions that is an HTTP push
(:class:`ferry.worker.push.PushClient`); for Ferry's internal work (:mod:`ferry.internal`) it is:

- :class:`DelaySink` — the delay store: a record of the delay entry topic or of a level topic waits
  until its next step is due, then is written to the next level or to its target topic
  (:mod:`ferry.delay`); a record that cannot be scheduled, or whose target topic (or partition)
  does not exist or is internal when it is due, goes to ``<delay topic>.dlq`` with ``ferry-error``;
- :class:`TxnSink` — the transaction log: each entry goes to the back-check runner
  (:mod:`ferry.worker.txn_checks`).

A sink answers 200 once its record is done (written and acknowledged, or resolved), so the offset
merge commits exactly what is done and a new owner starts again from the oldest record not done.
A failed write answers 503 and the runner retries it with backoff, like an endpoint's 503.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import weakref
from collections.abc import Callable
from typing import Any, cast

from ferry import delay, internal, kafka, log, txn
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.netguard import EndpointPolicy
from ferry.subscription import Subscription
from ferry.topic_cache import TopicCache
from ferry.txnlog import TxnId, encode, parse_id
from ferry.worker.http1 import Http1Pool, PushError, encode_header_lines
from ferry.worker.producer import AsyncProducer, ProduceFailed
from ferry.worker.push import PushClient, PushResult, Record
from ferry.worker.txn_checks import CheckRunner

_log = log.get_logger(__name__)
OK = PushResult(200)
CHECK_ANSWER_BYTES = 64 * 1024
CHECK_TIMEOUT_S = 10.0


LEVEL_LEAD_MS = 20
"""A level's record enters the window this long before its level time is up; the sink sleeps the rest."""


class DelaySink:
    """Moves delayed records through the level topics to their targets, each when it is due."""

    def __init__(
        self,
        producer: AsyncProducer,
        delay_topic: str,
        topics: TopicCache | None = None,
        own_topics: frozenset[str] = frozenset(),
    ) -> None:
        self._producer = producer
        self.delay_topic = delay_topic
        self._topics = topics
        """The cluster's topics, to check a target before delivering to it (None: not checked)."""
        self._own_topics = own_topics
        self.levels = {delay.decade_topic(delay_topic, k): k for k in delay.DECADES}
        """Level topic → its decade."""
        self.moved = self.delivered = self.invalid = 0
        self._waiting: dict[int, int] = {}  # id(task-local marker) → its record's due time (epoch ms)
        self._holds: weakref.WeakSet[LevelHold] = weakref.WeakSet()  # the owned level partitions' heads
        self.late_ms: list[int] = []  # recent lateness of delivered records (bounded)

    def level_hold(self, topic: str, partition: int) -> LevelHold | None:
        """The hold rule of a level partition (None for the entry topic), which also keeps the
        head it holds back for :meth:`next_due`; it is forgotten with the partition's runner."""
        decade = self.levels.get(topic)
        if decade is None:
            return None
        hold = LevelHold(delay.Level(decade, partition + 1).delay_ms - LEVEL_LEAD_MS)
        self._holds.add(hold)
        return hold

    def next_due(self, now_ms: int) -> int | None:
        """The earliest due time of the records this worker holds: those in its sink and the
        head of each level partition it owns (a level's later records are due later than its head
        leaves it, not necessarily than its head is due: an estimate, exact for one record)."""
        dues = list(self._waiting.values())
        for hold in list(self._holds):
            head = hold.head
            if head is not None and hold(head) > now_ms:  # still held back, not yet in the sink
                with contextlib.suppress(delay.InvalidSchedule):  # it goes to the .dlq when taken
                    dues.append(delay.parse_schedule(list(head.headers))[0])
        return min(dues, default=None)

    async def push(self, record: Record) -> PushResult:
        try:
            schedule = delay.parse_schedule(list(record.headers))
            delay.check_delay(schedule.due, now_ms())
        except delay.InvalidSchedule as exc:
            return await self._invalid(record, str(exc))
        due = schedule.due
        marker = object()
        try:
            decade = self.levels.get(record.topic)
            if decade is not None:  # out of a level: wait out that level's delay first
                level = delay.Level(decade, record.partition + 1)
                self._waiting[id(marker)] = due
                await _sleep_until(record.timestamp_ms + level.delay_ms)
            while True:
                step = delay.next_step(due, now_ms())
                if step[0] == "hold":
                    self._waiting[id(marker)] = due
                    await _sleep_until(due)
                    continue
                self._waiting.pop(id(marker), None)
                return await self._step(record, schedule, step)
        finally:
            self._waiting.pop(id(marker), None)

    async def _step(self, record: Record, schedule: delay.Schedule, step: delay.Step) -> PushResult:
        """Write the record to its target (due) or to the next level."""
        try:
            if step[0] == "deliver":
                if self._topics is not None:
                    try:
                        partitions = await self._topics.partitions_exact(schedule.target)
                        delay.check_target(schedule, partitions, self._own_topics)
                    except kafka.KafkaUnavailable as exc:
                        return PushResult(503, error=str(exc))
                    except delay.InvalidSchedule as exc:
                        return await self._invalid(record, str(exc))
                headers = delay.delivered_headers(list(record.headers))
                await self._producer.send(schedule.target, record.value, record.key, headers, schedule.partition)
                self.delivered += 1
                # Late from its due time, or from when it was scheduled if that was after (a due
                # time in the past means now: such a record is not years late).
                self._lateness(now_ms() - max(schedule.due, record.timestamp_ms))
            else:
                lvl = cast(delay.Level, step[1])
                topic = lvl.topic(self.delay_topic)
                await self._producer.send(topic, record.value, record.key, list(record.headers), lvl.partition)
                self.moved += 1
        except ProduceFailed as exc:
            return PushResult(503, error=str(exc))
        return OK

    async def _invalid(self, record: Record, reason: str) -> PushResult:
        headers = [*record.headers, (delay.ERROR_HEADER, reason.encode())]
        try:
            await self._producer.send(f"{self.delay_topic}.dlq", record.value, record.key, headers)
        except ProduceFailed as exc:
            return PushResult(503, error=str(exc))
        self.invalid += 1
        _log.warning(
            "delay.invalid", topic=record.topic, partition=record.partition, offset=record.offset, error=reason
        )
        return OK

    def _lateness(self, ms: int) -> None:
        self.late_ms.append(max(0, ms))
        if len(self.late_ms) > 10_000:
            del self.late_ms[:5_000]

    def stats(self) -> dict[str, Any]:
        late = sorted(self.late_ms)
        p99 = late[min(len(late) - 1, int(len(late) * 0.99))] if late else None
        return {
            "moved": self.moved,
            "delivered": self.delivered,
            "invalid": self.invalid,
            "late_p99_ms": p99,
            "waiting_in_memory": len(self._waiting),
            "next_due": self.next_due(now_ms()),
        }


class LevelHold:
    """When a level partition's record may start (its level time, less a lead), remembering the
    last record asked about: the window asks about its head until the head is due, so while a
    record is held back, it is that head."""

    __slots__ = ("__weakref__", "head", "wait_ms")

    def __init__(self, wait_ms: int) -> None:
        self.wait_ms = wait_ms
        self.head: Record | None = None

    def __call__(self, record: Record) -> float:
        self.head = record
        return record.timestamp_ms + self.wait_ms


async def _sleep_until(epoch_ms: int) -> None:
    wait = (epoch_ms - now_ms()) / 1000
    if wait > 0:
        await asyncio.sleep(wait)


class TxnSink:
    """Hands transaction-log entries to the back-check runner, with its three ports wired to Kafka
    (the log and the records' topics, through the worker's producer) and HTTP (the check)."""

    def __init__(self, producer: AsyncProducer, txn_topic: str, policy: EndpointPolicy, max_checks: int) -> None:
        self._producer = producer
        self.txn_topic = txn_topic
        self._pool = Http1Pool(policy, max_per_origin=16)
        self.runner = CheckRunner(self, self._ask, self._write, max_checks=max_checks)

    async def push(self, record: Record) -> PushResult:
        entry = _entry(record)
        if entry is not None:
            await self.runner.handle(entry)
        return OK

    # --- the runner's ports --------------------------------------------------------------------

    async def append(self, txn_id: str, entry: dict[str, Any]) -> None:
        tid = cast(TxnId, parse_id(txn_id))
        value = encode({**entry, "id": txn_id, "ts": now_ms()})
        await self._producer.send(self.txn_topic, value, txn_id.encode(), partition=tid.partition)

    async def _ask(self, url: str, body: dict[str, Any]) -> txn.CheckAnswer:
        lines = encode_header_lines({"content-type": "application/json", "ferry-transaction-id": body["id"]})
        try:
            answer = await self._pool.post_lines(
                url, lines, json.dumps(body).encode(), CHECK_TIMEOUT_S, read_body=CHECK_ANSWER_BYTES
            )
        except (PushError, Exception) as exc:  # refused by the SSRF policy, unreachable, timed out
            _log.info("txn.check_unanswered", txn=body["id"], error=str(exc)[:200])
            return "unknown"
        if answer.truncated:
            return "unknown"
        return txn.parse_check_answer(answer.status, answer.body or b"")

    async def _write(self, txn_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        sends = []
        for seq, rec in enumerate(records):
            headers: list[tuple[str, bytes | None]] = [
                (str(n), None if v is None else base64.b64decode(v)) for n, v in rec.get("headers") or ()
            ]
            headers += [("ferry-transaction-id", txn_id.encode()), ("ferry-transaction-seq", str(seq).encode())]
            key, value = rec.get("key_b64"), rec.get("value_b64")
            sends.append(
                self._producer.send(
                    rec["topic"],
                    None if value is None else base64.b64decode(value),
                    None if key is None else base64.b64decode(key),
                    headers,
                    rec.get("partition"),
                )
            )
        # As the gateway's commit answers (§9): every later commit answer and read of the
        # transaction repeats what the `committed` entry logs.
        return [{"partition": p, "offset": o} for p, o in await asyncio.gather(*sends)]

    def close(self) -> None:
        self._pool.close()

    def stats(self) -> dict[str, Any]:
        c = self.runner.counters
        prepared = sorted(
            (o.state for o in self.runner.open.values() if o.state.state == "prepared"), key=lambda t: t.created_ms
        )
        return {
            "open": len(self.runner.open),
            "prepared": [
                {"id": t.id, "created_ms": t.created_ms, "timeout_ms": t.timeout_ms, "checks": t.checks}
                for t in prepared[:100]
            ],
            "checks": c.checks,
            "check_failures": c.check_failures,
            "committed": c.committed,
            "rolled_back": c.rolled_back,
            "oldest_prepared_age_s": self.runner.oldest_prepared_age_s(),
        }


def _entry(record: Record) -> dict[str, Any] | None:
    try:
        entry = json.loads(record.value or b"")
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str):
        return None
    if entry["kind"] == "prepare":
        nonce = (record.key or b"").decode("ascii", "replace")
        entry["id"] = str(TxnId(record.partition, record.offset, nonce))
    return entry


class Sinks(PushClient):
    """The worker's push client: HTTP for subscriptions, the internal sinks for Ferry's own work."""

    def __init__(self, producer: AsyncProducer, settings: Settings) -> None:
        policy = EndpointPolicy(settings.portal.endpoint_allow)
        super().__init__(policy, settings.cluster)
        topics = TopicCache(settings.kafka.client_config(), role="delay-targets")
        own = internal.own_topics(settings)
        self.delay = DelaySink(producer, settings.kafka.delay_topic, topics, own)
        self.txn = TxnSink(producer, settings.kafka.txn_topic, policy, settings.gateway.txn_max_checks)

    async def close(self) -> None:
        self.txn.close()
        await super().close()

    def stats(self) -> dict[str, Any]:
        return {"delay": self.delay.stats(), "txn": self.txn.stats()}

    def export(self, gauge: Any) -> None:
        """Expose the internal figures as ``ferry_internal{figure=...}``, computed when scraped."""
        figures: dict[str, Any] = {
            "delay_moved": lambda: self.delay.moved,
            "delay_delivered": lambda: self.delay.delivered,
            "delay_invalid": lambda: self.delay.invalid,
            "delay_late_p99_ms": lambda: self.delay.stats()["late_p99_ms"] or 0,
            "txn_prepared": lambda: len(self.txn.runner.open),
            "txn_checks": lambda: self.txn.runner.counters.checks,
            "txn_check_failures": lambda: self.txn.runner.counters.check_failures,
            "txn_committed": lambda: self.txn.runner.counters.committed,
            "txn_rolled_back": lambda: self.txn.runner.counters.rolled_back,
            "txn_oldest_prepared_age_s": self.txn.runner.oldest_prepared_age_s,
        }
        for name, read in figures.items():
            gauge.labels(name).set_function(read)

    def hold_until(self, sub: Subscription, topic: str, partition: int) -> Callable[[Record], float] | None:
        """A delay level's records start only shortly before their level time is up: a level
        holds one constant delay, so its head is always the next due, and the records behind it
        wait in the fetch buffer (bounded, the fetch paused) rather than in flight."""
        if sub.name == internal.DELAY:
            return self.delay.level_hold(topic, partition)  # None for the entry topic: routed at once
        return super().hold_until(sub, topic, partition)

    async def push(self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str = "default") -> PushResult:
        if sub.name == internal.DELAY:
            return await self.delay.push(record)
        if sub.name == internal.TXN:
            return await self.txn.push(record)
        return await super().push(sub, record, attempt, kafka_cluster)
