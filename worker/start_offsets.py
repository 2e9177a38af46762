"""Where a partition with no offset state starts: ``start_from`` resolved to a real offset.

Use case: the first owner of a partition (a new subscription, or a partition added later) must
know the offset it starts at *before* it pushes anything, so that the start can be written to the
offsets topic as the partition's first state (the engine's "anchor"). Without it, an owner that
dies before its first periodic flush leaves no state, and the next owner would resolve
``latest`` again, later, skipping every record in between.

- ``earliest``: the partition's low watermark.
- ``latest``: the high watermark is only a hint; the partition is read from the hint to its
  EOF, whose offset is the true end. On Kafka the read is empty; on a broker whose ListOffsets
  answers too low (the embedded one) it still finds the end. A partition that reaches no EOF
  from its hint within ``hint_timeout_s`` is read again from its beginning.

Concurrent resolutions are coalesced (:mod:`worker.coalesce`) into one blocking pass, with one
consumer kept open, so a worker taking a thousand new partitions pays for one pass, not a thousand.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from ferry import kafka
from worker.coalesce import Coalesced

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
            self._consumer = kafka.reader({**self._cfg, "group.id": "ferry.start-offsets"})
        c = self._consumer
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
        c.assign([TopicPartition(t, p, o) for (t, p), o in hints.items()])
        waiting = set(hints)
        ends: dict[TP, int] = {}
        started = time.monotonic()
        rewound = False
        try:
            while waiting:
                elapsed = time.monotonic() - started
                if elapsed > self._timeout_s:
                    raise kafka.KafkaUnavailable(
                        f"partitions {sorted(waiting)} reached no end within {self._timeout_s} s"
                    )
                if not rewound and elapsed > self._hint_timeout_s:
                    # A hint past the end (no broker should give one): read those from the beginning.
                    rewound = True
                    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in waiting])
                for m in c.consume(1000, 0.01):
                    err = m.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        tp = (cast(str, m.topic()), cast(int, m.partition()))
                        if tp in waiting:
                            ends[tp] = cast(int, m.offset())
                            waiting.discard(tp)
                    elif err is not None:
                        raise kafka.KafkaUnavailable(f"finding the end of a partition: {err.str()}")
        finally:
            c.unassign()
        return ends

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
