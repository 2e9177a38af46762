"""Coalescing: concurrent asks for keys answered by one blocking call per round, in a thread.

Use case: a worker taking over many partitions at once restores each one's offset state and
resolves each new one's start offset. Each of those is a read of Kafka that costs about the same
for one key as for a thousand, so the asks that arrive together are answered together: the
first ask starts a round, every ask made before the round's call begins joins it, and asks made
while a call runs form the next round. An error fails every ask of its round, none of the next;
an asker that is cancelled leaves the answer to the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from ferry.worker.blocking import in_daemon_thread

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Coalesced(Generic[K, V]):
    def __init__(self, fetch: Callable[[list[K]], Mapping[K, V]]) -> None:
        """``fetch`` is blocking and must answer every key it is given."""
        self._fetch = fetch
        self._pending: dict[K, asyncio.Future[V]] = {}
        self._runner: asyncio.Task[None] | None = None

    async def get(self, key: K) -> V:
        fut = self._pending.get(key)
        if fut is None:
            fut = self._pending[key] = asyncio.get_running_loop().create_future()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        # Shielded: an asker that is cancelled (a take given up) must not cancel the answer that
        # another asker of the same key, or the next take of that partition, is waiting for.
        return await asyncio.shield(fut)

    async def _run(self) -> None:
        await asyncio.sleep(0)  # let the asks of this moment join the round
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                # A daemon thread, not the loop's executor: a worker stopping while a read waits
                # on an unreachable broker must not wait out the read's timeout at loop shutdown.
                found = await in_daemon_thread(self._fetch, list(batch), name="ferry-coalesced-read")
            except Exception as exc:
                for fut in batch.values():
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for key, fut in batch.items():
                if not fut.done():
                    fut.set_result(found[key])
