"""Writing a request's records: the one operation behind every produce route of the gateway.

Use case: the native route, the seed's ``/v1/kafka/send`` and a transaction's commit all end here
with validated records (:mod:`ferry.gateway.records`). :func:`write` sends every record of the
request into the shared producer at once (librdkafka batches them with other requests' records)
and waits for all acknowledgements, so the answer says, per record, exactly what happened:

- ``{"partition", "offset"}`` — written and acknowledged by the brokers (``acks=all``); the offset
  is None when librdkafka did not learn it (a write retried after a timeout that the broker had
  already taken: ``DUPLICATE_SEQUENCE_NUMBER``, acknowledged without an offset);
- ``{"scheduled": true, "id", "deliver_at"}`` — a delayed record, written to ``FERRY_DELAY_TOPIC``
  with ``ferry-deliver-at``, ``ferry-target-topic`` and, when the record names its partition,
  ``ferry-target-partition`` (docs/contract.md §10); the delay store
  writes it to its topic when due. A due time already past is written to its topic at once;
- ``{"error", "field"}`` — refused on its own, for good (bad input, a partition the topic does not
  have, a record larger than Kafka takes): a retry of it fails the same way;
- ``{"error"}`` — not acknowledged by Kafka within the deadline, or failed: the error says whether
  it may be there (outcome unknown) or is not (a retry writes it once).

Order: records of one request are sent in request order, and the producer is idempotent with
``acks=all``, so records of one request with the same key (same partition) are written in request
order; so are those of successive requests on one connection, since a request is answered only
after its records are acknowledged.

:class:`Unavailable` (503 + ``Retry-After``) is raised when no record of the request can have been
written and none was refused; :class:`Unknown` (504) when none is known written and some may have
been. A request is answered by its deadline (``FERRY_GATEWAY_PRODUCE_TIMEOUT_MS`` after it arrived).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from confluent_kafka import KafkaError

from ferry import delay
from ferry.errors import FerryError
from ferry.gateway.producer import REFUSED_FOR_GOOD, Ack, Producer
from ferry.gateway.records import Outgoing, Refused, SendItem, send_items


class Unavailable(FerryError):
    """Kafka took none of the request's records; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int, results: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.results = results


class Unknown(FerryError):
    """No record of the request is known written, and some may have been (504): a retry without the
    same ``Idempotency-Key`` may write them twice."""


NOT_WRITTEN = frozenset({KafkaError._PURGE_QUEUE, KafkaError._TIMED_OUT_QUEUE, KafkaError.NOT_ENOUGH_REPLICAS})
"""Errors librdkafka gives a record that never reached a broker's log (its ``MSG_NOT_PERSISTED``):
a retry writes it once. Any other error — ``_MSG_TIMED_OUT``, ``_PURGE_INFLIGHT``, a request
timeout — may come after the brokers wrote it (``MSG_POSSIBLY_PERSISTED``)."""


def unknown_outcome(timeout_s: float, why: str) -> str:
    return (
        f"Kafka did not acknowledge the record within {timeout_s:g} s ({why}): it may or may not be "
        "written. A retry with the same Idempotency-Key answers this again and writes nothing; "
        "a retry without one may write it twice"
    )


SIZE_ERRORS = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE})


def refused_for_good(err: KafkaError, size: int, limit: int) -> str:
    """A record's own error for one Kafka refuses whatever the retry: what to change."""
    if err.code() in SIZE_ERRORS:
        return (
            f"Kafka refuses this record for good ({err.str()}): it is about {size:,} bytes, and the gateway "
            f"takes records up to {limit:,} bytes (message.max.bytes in FERRY_KAFKA_CONFIG; the topic's "
            "max.message.bytes may be lower); make it smaller or split it"
        )
    return f"Kafka refuses this record for good ({err.str()}): change the record; a retry fails the same way"


@dataclass
class Written:
    results: list[dict[str, Any]]
    placed: bytes | None = None
    """The results as JSON text instead (``results`` then empty), when every record was written
    now: the common request, answered without a dict per record."""
    records: int = 0  # written now
    scheduled: int = 0
    refused: int = 0
    failed: int = 0  # not written, or outcome unknown
    unknown: int = 0  # may have been written
    bytes: int = 0

    def listed(self) -> list[dict[str, Any]]:
        """One result per record: ``results``, or ``placed`` read back."""
        return self.results if self.placed is None else cast(list[dict[str, Any]], orjson.loads(self.placed))

    def answer(self) -> list[dict[str, Any]] | orjson.Fragment:
        """The results as an answer's ``results`` (orjson writes a Fragment as it is)."""
        return self.results if self.placed is None else orjson.Fragment(self.placed)


def delay_record(rec: Outgoing, due_ms: int) -> Outgoing:
    """The record as it waits in the delay topic: its target (topic, and partition if it names one)
    and due time in headers (§10); the delay store delivers it to that partition."""
    headers = [
        *rec.headers,
        (delay.DELIVER_AT_HEADER, str(due_ms).encode()),
        (delay.TARGET_TOPIC_HEADER, rec.topic.encode()),
    ]
    if rec.partition is not None:
        headers.append((delay.TARGET_PARTITION_HEADER, str(rec.partition).encode()))
    return Outgoing(rec.topic, rec.key, rec.value, headers)


def _sort_out(
    records: list[Outgoing | Refused],
    results: list[dict[str, Any] | None],
    out: Written,
    partitions: dict[str, int],
    delay_topic: str,
    now_ms: int,
    dues: dict[int, int],
) -> tuple[list[SendItem], list[int]]:
    """The records to send of a request that is not all plain, and the index of each: a refused one
    gets its result now (and is counted in ``out``), a delayed one goes to the delay topic (its due
    time in ``dues``)."""
    sending: list[SendItem] = []
    where: list[int] = []
    for i, rec in enumerate(records):
        if isinstance(rec, Refused):
            results[i] = rec.result()
            out.refused += 1
            continue
        if rec.partition is not None and rec.partition >= (count := partitions[rec.topic]):
            results[i] = {
                "error": f"topic {rec.topic!r} has partitions 0-{count - 1}",
                "field": f"records[{i}].partition",
            }
            out.refused += 1
            continue
        if rec.due_ms is not None and rec.due_ms > now_ms:
            dues[i] = rec.due_ms
            rec = delay_record(rec, rec.due_ms)
            sending.append((rec, delay_topic, rec.size))
        else:
            sending.append((rec, rec.topic, rec.size))
        where.append(i)
    return sending, where


async def write(
    producer: Producer,
    records: list[Outgoing | Refused],
    *,
    partitions: dict[str, int],
    delay_topic: str,
    now_ms: int,
    deadline: float,
) -> Written:
    """Send every valid record, wait for every acknowledgement until ``deadline``
    (``time.monotonic()``), and say what happened to each. ``partitions``: the partition count of
    every target topic of ``records``."""
    results: list[dict[str, Any] | None] = [None] * len(records)
    out = Written([])
    dues: dict[int, int] = {}  # index → due time, of the delayed ones
    sending = send_items(records)  # the common request: every record sent now, as it is
    where: Sequence[int] = range(len(records))  # index in the request of each record sent
    if sending is None:
        sending, where = _sort_out(records, results, out, partitions, delay_topic, now_ms, dues)
    acks: list[Ack | None] = []
    busy = None
    expired = False
    if sending:
        pending, busy = producer.send_many(sending)
        if not pending.fut.done():
            producer.watch(pending, deadline)
        got = await pending.fut
        if got is not None and busy is None and not dues and len(sending) == len(records):
            # Every record sent at once, none delayed, and all acknowledged: the common request.
            # Unless an acknowledgement carries an error, each result is where it was written.
            placed = pending.placed()
            if placed is not None:
                out.placed, out.records, out.bytes = placed, len(records), pending.size
                return out
        expired = got is None
        acks = got if got is not None else list(pending.acks)
    written = scheduled = failed = unknown = size_written = 0
    queued_until = len(sending) if busy is None else busy.at
    for n, (i, (_, _, size), ack) in enumerate(zip(where, sending, acks, strict=True)):
        if ack is None:
            if n >= queued_until:  # not queued: Kafka could not take it now
                results[i] = {"error": f"not written: {busy}"}
            else:  # queued, not acknowledged by the deadline
                results[i] = {"error": unknown_outcome(producer.produce_timeout_s, "no answer from the brokers")}
                unknown += 1
            failed += 1
        elif ack[0] is not None:
            code = ack[0].code()
            if code in REFUSED_FOR_GOOD:
                results[i] = {
                    "error": refused_for_good(ack[0], size, producer.max_record_bytes),
                    "field": f"records[{i}].value",
                }
                out.refused += 1
            elif code in NOT_WRITTEN:
                results[i] = {"error": f"not written: Kafka failed it ({ack[0].str()}); retry it"}
                failed += 1
            else:
                results[i] = {"error": unknown_outcome(producer.produce_timeout_s, ack[0].str())}
                failed += 1
                unknown += 1
        elif i not in dues:
            results[i] = {"partition": ack[1], "offset": ack[2]}
            written += 1
            size_written += size
        else:
            due = dues[i]
            # An offset librdkafka did not learn (a retried write the broker had taken) is null.
            ident = None if ack[2] is None else f"{delay_topic}/{ack[1]}/{ack[2]}"
            results[i] = {"scheduled": True, "id": ident, "deliver_at": due}
            scheduled += 1
            size_written += size
    out.records, out.scheduled, out.failed, out.unknown, out.bytes = written, scheduled, failed, unknown, size_written
    out.results = [r or {} for r in results]
    if out.failed and not (out.records or out.scheduled or out.refused):
        if out.unknown:
            raise Unknown(
                unknown_outcome(producer.produce_timeout_s, "no answer from the brokers" if expired else "failed")
            )
        if busy is not None:
            raise Unavailable(str(busy), busy.retry_after_s, out.results)
        raise Unavailable("Kafka wrote none of the records; retry shortly", 2, out.results)
    return out
