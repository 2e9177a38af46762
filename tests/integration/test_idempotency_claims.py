"""The idempotency keys' claims on the real broker, in process: a claim whose predecessors the tail
has read is decided without reading it back, and the first claim in the log still wins — between
two requests of one replica and against another replica's earlier claim."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferry.gateway.idempotency import Idempotency
from tests.support.wait import until_async

pytestmark = pytest.mark.integration


def test_claims_decide_without_reading_back_and_the_first_still_wins(kafka_bootstrap: str, topic_name: str) -> None:
    asyncio.run(_scenario(kafka_bootstrap, topic_name))


async def _scenario(bootstrap: str, topic: str) -> None:
    loop = asyncio.get_running_loop()
    ours, other = (Idempotency({"bootstrap.servers": bootstrap}, topic, wait_s=20) for _ in range(2))
    await asyncio.to_thread(ours.start, loop)
    await asyncio.to_thread(other.start, loop)
    read_backs = 0
    until_read = ours._until_read

    async def counted(partition: int, offset: int, deadline: float) -> None:
        nonlocal read_backs
        read_backs += 1
        await until_read(partition, offset, deadline)

    ours._until_read = counted  # type: ignore[method-assign]
    runs: list[str] = []

    def runner(name: str, hold: asyncio.Event | None = None) -> Any:
        async def run() -> tuple[int, dict[str, Any]]:
            runs.append(name)
            if hold is not None:
                await hold.wait()
            return 200, {"by": name}

        return run

    try:
        # One at a time, nothing unread before the claim: decided without reading it back.
        assert await ours.run("tok", "k1", "fp", runner("first")) == (200, {"by": "first"}, False)
        assert read_backs == 0
        repeat = await ours.run("tok", "k1", "fp", runner("again"))
        assert repeat == (200, {"by": "first"}, True) and runs == ["first"]

        # Two at once with one key in one replica: one runs, the other gets its answer.
        a, b = await asyncio.gather(ours.run("tok", "k2", "fp", runner("a")), ours.run("tok", "k2", "fp", runner("b")))
        assert len(runs) == 2 and a[:2] == b[:2] and {a[2], b[2]} == {False, True}

        # Another replica claimed first and is still running: ours waits and answers its answer.
        hold = asyncio.Event()
        theirs = asyncio.create_task(other.run("tok", "k3", "fp", runner("other", hold)))
        await until_async(lambda: "other" in runs, timeout_s=20, what="the other replica running its request")
        mine = asyncio.create_task(ours.run("tok", "k3", "fp", runner("mine")))
        done, _ = await asyncio.wait({mine}, timeout=0.3)
        assert not done and "mine" not in runs  # it waits for the first claim's outcome
        hold.set()
        assert await theirs == (200, {"by": "other"}, False)
        assert await asyncio.wait_for(mine, 20) == (200, {"by": "other"}, True)
        assert "mine" not in runs
    finally:
        ours.close()
        other.close()
