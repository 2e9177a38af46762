"""Which topics exist and how many partitions each has, cached: no per-record metadata call, and
no topic ever created by asking (a broker with auto-create on creates a topic named in
``list_topics(topic)``: only the all-topics listing is used).

Use cases: the gateway answers a produce request for an unknown topic 404 and refuses a record for
a partition the topic does not have; the delay store dead-letters a record whose target topic or
partition does not exist instead of writing it (docs/delay.md). The cache is refreshed every
``refresh_s`` in the background; a topic it does not know triggers one refresh at most every
``miss_refresh_s`` (a topic created a moment ago is found at once; a stream of requests for a
topic that does not exist costs one metadata call per second, not one per request). A caller whose
write failed in a way a deleted topic explains calls :meth:`TopicCache.doubt`: the next lookup
lists again (at most once per ``miss_refresh_s``), so a deleted topic is answered 404 within
about a second of the first failure, not after ``refresh_s``.

Blocking (Kafka metadata): :meth:`TopicCache.refresh` runs in a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from ferry import kafka, log

_log = log.get_logger(__name__)


class TopicCache:
    def __init__(
        self,
        client_config: Mapping[str, Any],
        refresh_s: float = 30.0,
        miss_refresh_s: float = 1.0,
        role: str = "gateway-metadata",
    ) -> None:
        self._config = dict(client_config)
        self._role = role
        self.refresh_s = refresh_s
        self.miss_refresh_s = miss_refresh_s
        self._partitions: dict[str, int] = {}
        self._refreshed_at = float("-inf")
        self._doubted_at = float("-inf")  # listings begun before this are trusted miss_refresh_s only
        self._lock = asyncio.Lock()
        self.listed = False
        """Whether the last refresh succeeded: a topic missing from a failed one may yet exist."""

    def refresh(self) -> dict[str, int]:
        """Blocking: read every topic's partition count from the brokers."""
        started = time.monotonic()
        client = kafka.admin(self._config, self._role)
        try:
            meta = client.list_topics(timeout=5)
        except KafkaException as exc:
            raise kafka.KafkaUnavailable(f"cannot list topics: {exc}") from None
        finally:
            client.poll(0)
        counts = {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None and t.partitions}
        self._partitions = counts
        self._refreshed_at = started  # the listing holds every topic that existed when it began
        self.listed = True
        return counts

    def doubt(self) -> None:
        """A write failed as it would for a topic deleted since the last listing: every count
        listed before now is no longer trusted, so the next lookup lists again (:meth:`partitions`
        not within ``miss_refresh_s`` of the last listing)."""
        self._doubted_at = time.monotonic()

    def _known(self, topic: str) -> int | None:
        """The topic's count from a listing still trusted (under ``refresh_s`` old, not doubted)."""
        fresh = time.monotonic() - self._refreshed_at < self.refresh_s and self._refreshed_at >= self._doubted_at
        return self._partitions.get(topic) if fresh else None

    async def partitions(self, topic: str) -> int | None:
        """The topic's partition count, or None when the brokers do not have it."""
        known = self._known(topic)
        if known is not None:
            return known
        if topic not in self._partitions and time.monotonic() - self._refreshed_at < self.miss_refresh_s:
            return None
        async with self._lock:
            if time.monotonic() - self._refreshed_at >= min(self.miss_refresh_s, self.refresh_s):
                try:
                    await asyncio.to_thread(self.refresh)
                except kafka.KafkaUnavailable as exc:
                    _log.warning("topics.metadata_unavailable", role=self._role, error=str(exc))
                    self._refreshed_at = time.monotonic()  # keep answering from what is known
                    self.listed = False
        return self._partitions.get(topic)

    async def partitions_exact(self, topic: str) -> int | None:
        """As :meth:`partitions`, but a topic it does not know is looked up in a listing begun after
        this call (one listing shared by concurrent callers), never the last second's: None means
        the topic did not exist just now. Raises :class:`ferry.kafka.KafkaUnavailable` when the
        brokers cannot list topics."""
        known = self._known(topic)
        if known is not None:
            return known
        asked = time.monotonic()
        async with self._lock:
            if self._refreshed_at < asked or not self.listed:
                await asyncio.to_thread(self.refresh)
        return self._partitions.get(topic)
