"""The wall clock as Ferry stamps and compares times: epoch milliseconds.

Kafka record timestamps, due times of delayed records, and the ``ts``/``since`` fields of what
Ferry stores in Kafka and ZooKeeper are all epoch milliseconds. Code that tests drive with a fake
clock takes a ``now_ms`` callable and defaults it to :func:`now_ms`.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (the wall clock: it may step; never use it to measure a wait)."""
    return int(time.time() * 1000)
