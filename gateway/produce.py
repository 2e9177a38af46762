"""Writing a request's records: the one operation behind every produce route of the gateway.

Use case: the native route, the seed's ``/v1/kafka/send`` and a transaction's commit all end here
with validated records (:mod:`ferry.gateway.records`). :func:`write` sends every record of the
request into the shared producer at once (librdkafka batches them with other requests' records)
and waits for all acknowledgements, so the answer says, per record, exactly what happened:

- ``{"partition", "offset"}`` — written and acknowledged by the brokers (``acks=all``);
- ``{"scheduled": true, "id", "deliver_at"}`` — a delayed record, written to ``FERRY_DELAY_TOPIC``
  with ``ferry-deliver-at``, ``ferry-target-topic`` and, when the record names its partition,
  ``ferry-target-partition`` (docs/contract.md §10); the delay store
  writes it to its topic when due. A due time already past is written to its topic at once;
- ``{"error", "field"}`` — refused on its own (bad input, a partition the topic does not have);
- ``{"error"}`` — Kafka did not acknowledge it (timeout, broker error): it may or may not be there.

Order: records of one request are sent in request order, and the producer is idempotent with
``acks=all``, so records of one request with the same key (same partition) are written in request
order; so are those of successive requests on one connection, since a request is answered only
after its records are acknowledged.

:class:`Unavailable` (503 + ``Retry-After``) is raised when Kafka could take none of the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferry import delay
from ferry.errors import FerryError
from ferry.gateway.producer import Ack, Producer
from ferry.gateway.records import Outgoing, Refused


class Unavailable(FerryError):
    """Kafka took none of the request's records; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int, results: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.results = results


@dataclass
class Written:
    results: list[dict[str, Any]]
    records: int = 0  # written now
    scheduled: int = 0
    refused: int = 0
    failed: int = 0
    bytes: int = 0


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


async def write(
    producer: Producer,
    records: list[Outgoing | Refused],
    *,
    partitions: dict[str, int],
    delay_topic: str,
    now_ms: int,
) -> Written:
    """Send every valid record, wait for every acknowledgement, and say what happened to each.
    ``partitions``: the partition count of every target topic of ``records``."""
    results: list[dict[str, Any] | None] = [None] * len(records)
    out = Written([])
    sending: list[tuple[Outgoing, str, int]] = []
    where: list[int] = []  # index in the request of each record sent
    dues: dict[int, int] = {}  # index → due time, of the delayed ones
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
    acks: list[Ack | None] = []
    busy = None
    if sending:
        fut, busy = producer.send_many(sending)
        acks = await fut
    written = scheduled = failed = size_written = 0
    for i, (_, _, size), ack in zip(where, sending, acks, strict=True):
        if ack is None:  # not queued: Kafka could not take it
            results[i] = {"error": str(busy)}
            failed += 1
        elif ack[0] is not None:
            results[i] = {"error": f"not acknowledged by Kafka: {ack[0].str()}"}
            failed += 1
        elif i not in dues:
            results[i] = {"partition": ack[1], "offset": ack[2]}
            written += 1
            size_written += size
        else:
            due = dues[i]
            results[i] = {"scheduled": True, "id": f"{delay_topic}/{ack[1]}/{ack[2]}", "deliver_at": due}
            scheduled += 1
            size_written += size
    out.records, out.scheduled, out.failed, out.bytes = written, scheduled, failed, size_written
    if busy is not None and out.refused == 0 and all(ack is None for ack in acks):  # Kafka took none
        raise Unavailable(str(busy), busy.retry_after_s, [r or {} for r in results])
    out.results = [r or {} for r in results]
    if out.failed and not (out.records or out.scheduled or out.refused):
        raise Unavailable("Kafka acknowledged none of the records; retry shortly", 2, out.results)
    return out
