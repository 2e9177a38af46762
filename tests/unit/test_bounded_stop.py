"""The pure pieces of a bounded stop: the final-write bound derived from the drain timeout, and
closing blocking clients without waiting past a bound."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ferry.worker.blocking import close_within, in_daemon_thread
from ferry.worker.engine import CLOSE_GRACE_S, final_write_timeout_ms
from ferry.worker.producer import PURGED_REPORTS_S


@pytest.mark.parametrize(
    ("drain_ms", "expect_ms"),
    [
        (10_000, 5_000),  # the default drain timeout
        (3_000, 1_500),
        (1_000, 1_000),  # never below 1 s: a healthy broker confirms in milliseconds, a busy one may not
        (1, 1_000),
        (20_000, 10_000),
        (600_000, 10_000),  # never above 10 s
    ],
)
def test_final_write_bound(drain_ms: int, expect_ms: int) -> None:
    assert final_write_timeout_ms(drain_ms) == expect_ms


@pytest.mark.parametrize("drain_ms", [1, 3_000, 10_000, 60_000, 3_600_000])
def test_a_whole_stop_fits_the_helm_grace_period(drain_ms: int) -> None:
    """helm/ferry/templates/worker.yaml: terminationGracePeriodSeconds = drain timeout + 20 s."""
    stop_s = (drain_ms + final_write_timeout_ms(drain_ms)) / 1000 + CLOSE_GRACE_S + PURGED_REPORTS_S
    assert stop_s < drain_ms / 1000 + 20 - 5  # 5 s left for deregistering and exiting


async def test_close_within_leaves_a_hanging_close_behind() -> None:
    hang = threading.Event()
    closed: list[str] = []
    try:
        left = await asyncio.wait_for(
            close_within({"quick": lambda: closed.append("quick"), "hangs": hang.wait, "fails": lambda: 1 / 0}, 0.2),
            timeout=5,
        )
        assert left == ["hangs"]
        assert closed == ["quick"]
    finally:
        hang.set()


async def test_in_daemon_thread_result_error_and_daemon() -> None:
    assert await in_daemon_thread(lambda: threading.current_thread().daemon) is True
    with pytest.raises(ZeroDivisionError):
        await in_daemon_thread(lambda: 1 / 0)


def test_an_ending_service_waits_for_its_pool_only_so_long() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ferry.runtime import drain

    never = threading.Event()
    stuck = ThreadPoolExecutor(max_workers=4)
    stuck.submit(never.wait)  # a call to a ZooKeeper that is gone
    stuck.submit(lambda: None)
    started = time.monotonic()
    assert drain(stuck, 0.3) == 1
    assert time.monotonic() - started < 2
    never.set()  # let the test's thread go

    fine = ThreadPoolExecutor(max_workers=4)
    for _ in range(8):
        fine.submit(time.sleep, 0.01)
    assert drain(fine, 5.0) == 0


_STUCK_SERVICE = """
import asyncio, threading
from ferry import runtime

async def serve() -> int:
    loop = asyncio.get_running_loop()
    loop.run_in_executor(None, threading.Event().wait)  # a call to a server that is gone
    await asyncio.sleep(0.05)
    return 3

raise SystemExit(runtime.run("demo", serve, exit_s=0.3))
"""


def test_a_service_with_a_stuck_call_still_exits_with_its_code() -> None:
    """Closing an event loop waits for every thread of its default executor: without the bound
    in :func:`ferry.runtime.run` this process would never end."""
    import subprocess
    import sys

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _STUCK_SERVICE], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3, done.stderr
    assert "demo.exit_abandoning_calls" in done.stdout + done.stderr
    assert time.monotonic() - started < 20
