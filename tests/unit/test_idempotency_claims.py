"""Table tests of gateway/idempotency.py's :func:`first_claim`: which claim of a key stands once a
new one is read after the entries before it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferry.clock import now_ms
from ferry.gateway.idempotency import KEEP_MS, Entry, Idempotency, KeyUnavailable, _kafka_key, first_claim

NOW = 1_800_000_000_000
OURS = Entry("claimed", "fp", "ours", NOW)
TTL = 37_000  # Idempotency.claim_ttl_ms at a 15 s produce timeout


@pytest.mark.parametrize(
    ("old", "stands"),
    [
        (None, OURS),  # nothing before: ours is first
        (Entry("claimed", "fp", "theirs", NOW - 5), "old"),  # an earlier live claim wins
        (Entry("done", "fp", "theirs", NOW - 5, 200, {"results": []}), "old"),  # and its outcome stays
        (Entry("released", "fp", "theirs", NOW - 5), OURS),  # it wrote nothing: the key is free
        (Entry("claimed", "fp", "theirs", NOW - KEEP_MS - 1), OURS),  # older than 24 h: forgotten
        (Entry("done", "fp", "theirs", NOW - KEEP_MS), OURS),
        (Entry("claimed", "fp", "ours", NOW), OURS),  # ours, already read back by the tail
        (Entry("claimed", "fp", "theirs", NOW - TTL + 1), "old"),  # its request may still run
        (Entry("claimed", "fp", "theirs", NOW - TTL), OURS),  # abandoned: neither done nor released
        (Entry("done", "fp", "theirs", NOW - TTL - 1, 504, {"error": "unknown"}), "old"),  # an answer stays
    ],
)
def test_the_first_live_claim_stands(old: Entry | None, stands: Entry | str) -> None:
    assert first_claim(old, OURS, NOW, TTL) is (old if stands == "old" else stands)


def test_a_claim_written_at_an_unknown_offset_frees_the_key() -> None:
    """librdkafka acknowledges a retried write the broker already had (DUPLICATE_SEQUENCE_NUMBER)
    with no offset: the claim is given up and released, not compared with None (a TypeError that
    held the key for 24 h)."""

    async def main() -> None:
        idem = Idempotency({"bootstrap.servers": "127.0.0.1:9"}, "keys", wait_s=1)
        idem._changed = asyncio.Event()
        written: list[str] = []
        ran: list[bool] = []

        async def append(kkey: bytes, entry: Entry, deadline: float) -> tuple[int, int | None]:
            written.append(entry.state)
            return 0, None

        async def run() -> tuple[int, dict[str, Any]]:
            ran.append(True)
            return 200, {}

        idem._append = append  # type: ignore[method-assign]
        try:
            with pytest.raises(KeyUnavailable, match="unknown offset"):
                await idem.run("tok", "k", "fp", run)
            await asyncio.sleep(0.01)  # the release is written in the background
        finally:
            idem._served.close(0)
        assert written == ["claimed", "released"] and not ran

    asyncio.run(main())


@pytest.mark.parametrize(
    ("ago_ms", "entry", "recalled"),
    [
        (None, None, None),  # never sent with this token
        (5, Entry("claimed", "fp", "c", 0), "claimed"),  # still running
        (5, Entry("done", "fp", "c", 0, 200, {"results": []}), "done"),
        (5, Entry("done", "fp", "c", 0, 504, {"error": "unknown"}), "done"),  # an unknown outcome stays
        (5, Entry("released", "fp", "c", 0), None),  # it wrote nothing: sending it now runs it
        (KEEP_MS + 1, Entry("done", "fp", "c", 0, 200, {}), None),  # older than 24 h
        ("ttl", Entry("claimed", "fp", "c", 0), None),  # abandoned: its replica died
    ],
)
def test_recall_says_what_a_request_sent_now_would_meet(
    ago_ms: int | str | None, entry: Entry | None, recalled: str | None
) -> None:
    idem = Idempotency({"bootstrap.servers": "127.0.0.1:9"}, "keys", wait_s=1)
    try:
        if entry is not None:
            age = idem.claim_ttl_ms if ago_ms == "ttl" else int(ago_ms or 0)
            entry.at_ms = now_ms() - age
            idem._remember(_kafka_key("tok", "k"), entry)
        got = idem.recall("tok", "k")
        assert (got.state if got else None) == recalled
        assert idem.recall("other-token", "k") is None  # keys are per token
    finally:
        idem._served.close(0)
