"""Which topics exist and how many partitions each has, cached: the gateway never asks the brokers
per request and never creates a topic.

Use case: a produce request names a topic; an unknown one is answered 404, a record for a
partition the topic does not have is refused on its own. The cache is refreshed every
``refresh_s`` in the background; a topic it does not know triggers one refresh at most every
``miss_refresh_s`` (a topic created a moment ago is found at once; a stream of requests for a
topic that does not exist costs one metadata call per second, not one per request).

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
    def __init__(self, client_config: Mapping[str, Any], refresh_s: float = 30.0, miss_refresh_s: float = 1.0) -> None:
        self._config = dict(client_config)
        self.refresh_s = refresh_s
        self.miss_refresh_s = miss_refresh_s
        self._partitions: dict[str, int] = {}
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()

    def refresh(self) -> dict[str, int]:
        """Blocking: read every topic's partition count from the brokers."""
        client = kafka.admin(self._config, "gateway-metadata")
        try:
            meta = client.list_topics(timeout=5)
        except KafkaException as exc:
            raise kafka.KafkaUnavailable(f"cannot list topics: {exc}") from None
        finally:
            client.poll(0)
        counts = {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None and t.partitions}
        self._partitions = counts
        self._refreshed_at = time.monotonic()
        return counts

    async def partitions(self, topic: str) -> int | None:
        """The topic's partition count, or None when the brokers do not have it."""
        age = time.monotonic() - self._refreshed_at
        count = self._partitions.get(topic)
        if count is not None and age < self.refresh_s:
            return count
        if count is None and age < self.miss_refresh_s:
            return None
        async with self._lock:
            if time.monotonic() - self._refreshed_at >= min(self.miss_refresh_s, self.refresh_s):
                try:
                    await asyncio.to_thread(self.refresh)
                except kafka.KafkaUnavailable as exc:
                    _log.warning("gateway.metadata_unavailable", error=str(exc))
                    self._refreshed_at = time.monotonic()  # keep answering from what is known
        return self._partitions.get(topic)
