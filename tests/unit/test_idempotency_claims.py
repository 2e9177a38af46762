"""Table tests of gateway/idempotency.py's :func:`first_claim`: which claim of a key stands once a
new one is read after the entries before it."""

from __future__ import annotations

import pytest

from ferry.gateway.idempotency import KEEP_MS, Entry, first_claim

NOW = 1_800_000_000_000
OURS = Entry("claimed", "fp", "ours", NOW)


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
    ],
)
def test_the_first_live_claim_stands(old: Entry | None, stands: Entry | str) -> None:
    assert first_claim(old, OURS, NOW) is (old if stands == "old" else stands)
