"""ferry/topic_cache.py without a broker: when it lists the topics again."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferry import kafka
from ferry.topic_cache import TopicCache


class Listing:
    def __init__(self, cache: TopicCache, topics: dict[str, int]) -> None:
        self.topics, self.calls, self.down = topics, 0, False
        self._cache = cache

    def __call__(self) -> dict[str, int]:
        self.calls += 1
        if self.down:
            raise kafka.KafkaUnavailable("cannot list topics: down")
        self._cache._partitions = dict(self.topics)
        self._cache._refreshed_at = time.monotonic()
        self._cache.listed = True
        return self._cache._partitions


def cache_with(topics: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> tuple[TopicCache, Listing]:
    cache = TopicCache({}, refresh_s=30, miss_refresh_s=1)
    listing = Listing(cache, topics)
    monkeypatch.setattr(cache, "refresh", listing)
    return cache, listing


def test_a_known_topic_is_answered_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, listing = cache_with({"orders": 3}, monkeypatch)

    async def main() -> list[int | None]:
        return [await cache.partitions_exact("orders") for _ in range(5)]

    assert asyncio.run(main()) == [3] * 5 and listing.calls == 1


def test_a_topic_created_a_moment_ago_is_found_by_the_exact_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's lookup answers a miss from the last second's listing; the delay store's must
    not (it would dead-letter a record for a topic that exists), so each miss lists again."""
    cache, listing = cache_with({"orders": 3}, monkeypatch)

    async def main() -> tuple[int | None, int | None, int | None]:
        await cache.partitions("orders")
        listing.topics["new"] = 2
        return await cache.partitions("new"), await cache.partitions_exact("new"), await cache.partitions_exact("gone")

    assert asyncio.run(main()) == (None, 2, None) and listing.calls == 3


def test_the_exact_lookup_says_when_it_cannot_list(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, listing = cache_with({}, monkeypatch)
    listing.down = True
    with pytest.raises(kafka.KafkaUnavailable):
        asyncio.run(cache.partitions_exact("orders"))


@pytest.mark.parametrize(
    ("exact", "miss_refresh_s", "doubted", "answer", "listings"),
    [
        (False, 0, False, 3, 1),  # no doubt: the cached count, for refresh_s
        (False, 0, True, None, 2),  # a failed write doubts it: the next lookup lists and finds it gone
        (False, 60, True, 3, 1),  # ... but not again within miss_refresh_s of the last listing
        (True, 60, False, 3, 1),  # the exact lookup trusts a known count as long
        (True, 60, True, None, 2),  # ... and lists again after a doubt, whenever the last listing was
    ],
)
def test_a_doubt_lists_a_deleted_topic_again(
    monkeypatch: pytest.MonkeyPatch,
    exact: bool,
    miss_refresh_s: float,
    doubted: bool,
    answer: int | None,
    listings: int,
) -> None:
    cache, listing = cache_with({"orders": 3}, monkeypatch)
    cache.miss_refresh_s = miss_refresh_s
    lookup = cache.partitions_exact if exact else cache.partitions

    async def main() -> int | None:
        await lookup("orders")
        del listing.topics["orders"]
        if doubted:
            cache.doubt()
        return await lookup("orders")

    assert asyncio.run(main()) == answer and listing.calls == listings
