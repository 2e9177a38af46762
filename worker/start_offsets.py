"""Where a partition with no offset state starts: ``start_from`` resolved to a real offset.

Use case: the first owner of a partition (a new subscription, or a partition added later) must
know the offset it starts at *before* it pushes anything, so that the start can be written to the
offsets topic as the partition's first state (the engine's "anchor"). Without it, an owner that
dies before its first periodic flush leaves no state, and the next owner would resolve
``latest`` again, later, skipping every record in between.

- ``earliest``: the partition's low watermark.
- ``latest``: the high watermark is only a hint; the partition is read from the hint to its
  EOF, whose offset is the true end (:func:`ferry.kafka.read_partitions_to_end`). On Kafka the
  read is empty; on a broker whose ListOffsets answers too low (the embedded one) it still finds
  the end. A partition that gives nothing from its hint within ``hint_timeout_s`` is read again
  from its beginning.

Concurrent resolutions are coalesced (:mod:`worker.coalesce`) into one blocking pass, with one
consumer kept open, so a worker taking a thousand new partitions pays for one pass, not a thousand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ferry import kafka
from ferry.worker.coalesce import Coalesced

TP = tuple[str, int]
Want = tuple[TP, str]  # (topic, partition), "earliest" | "latest"


class StartOffsets:
    def __init__(self, client_config: Mapping[str, Any], timeout_s: float = 30.0, hint_timeout_s: float = 3.0) -> None:
        self._cfg = dict(client_config)
        self._timeout_s = timeout_s
        self._hint_timeout_s = hint_timeout_s
        self._wants: Coalesced[Want, int] = Coalesced(self.resolve_blocking)
        self._consumer: Consumer | None = None

    async def resolve(self, tp: TP, start_from: str) -> int:
        return await self._wants.get((tp, start_from))

    def resolve_blocking(self, wants: list[Want]) -> dict[Want, int]:
        if self._consumer is None:
            self._consumer = kafka.reader({**self._cfg, "group.id": "ferry.start-offsets"}, "start-offsets")
            kafka.IDLE_LOGS.watch(self._consumer)  # between resolutions nobody polls it
        with kafka.IDLE_LOGS.busy(self._consumer):
            return self._resolve(self._consumer, wants)

    def _resolve(self, c: Consumer, wants: list[Want]) -> dict[Want, int]:
        out: dict[Want, int] = {}
        hints: dict[TP, int] = {}
        for want in wants:
            (topic, p), start_from = want
            try:
                low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            except KafkaException as exc:
                raise kafka.KafkaUnavailable(f"cannot read the watermarks of {topic}[{p}]: {exc}") from None
            if start_from == "earliest":
                out[want] = max(low, 0)
            else:
                hints[(topic, p)] = max(high, 0)
        if hints:
            ends = self._read_to_ends(c, hints)
            for want in wants:
                if want[1] != "earliest":
                    out[want] = ends[want[0]]
        return out

    def _read_to_ends(self, c: Consumer, hints: dict[TP, int]) -> dict[TP, int]:
        """The true end of each partition, read from its hint (rewound to the beginning when the
        hint is past the end: nothing came from it within ``hint_timeout_s``)."""
        return kafka.read_partitions_to_end(c, hints, timeout_s=self._timeout_s, rewind_after_s=self._hint_timeout_s)

    def close(self) -> None:
        if self._consumer is not None:
            kafka.IDLE_LOGS.forget(self._consumer)
            self._consumer.close()
            self._consumer = None
