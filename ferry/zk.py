"""The ZooKeeper client every Ferry service uses, with its one retry policy.

Connection loss is retried forever with a short capped backoff (a service waits for ZooKeeper
rather than dying; its session timeout decides when others take its work), and each command a
few times, so a brief leader election inside the ensemble is not an error. The coordinator, the
workers and the portal all connect through :func:`make_client`.
"""

from __future__ import annotations

import contextlib
import threading

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from ferry.config import Settings


def make_client(settings: Settings) -> KazooClient:
    return KazooClient(
        hosts=settings.zookeeper.connect,
        timeout=settings.zookeeper.session_timeout_ms / 1000,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
    )


def start(
    client: KazooClient,
    settings: Settings,
    stopping: threading.Event | None = None,
    attempt_s: float = 10.0,
    max_wait_s: float = 30.0,
) -> bool:
    """Blocking: connect, waiting for ZooKeeper as long as it takes (as a pod waits for its
    dependencies), with one log line per failed attempt naming the setting and the address.
    Returns False when ``stopping`` was set before a connection was made."""
    from kazoo.handlers.threading import KazooTimeoutError

    from ferry import log

    logger = log.get_logger("ferry.zk")
    wait = 1.0
    stopping = stopping or threading.Event()
    while not stopping.is_set():
        try:
            client.start(timeout=attempt_s)
            return True
        except KazooTimeoutError:
            logger.warning(
                "zookeeper.unreachable",
                setting="FERRY_ZK_CONNECT",
                address=settings.zookeeper.connect,
                next_try_s=wait,
                hint="start ZooKeeper or correct FERRY_ZK_CONNECT; this service waits for it",
            )
            client.stop()
            stopping.wait(wait)
            wait = min(max_wait_s, wait * 2)
    return False


CLOSE_S = 5.0
"""How long stopping waits for a ZooKeeper client to close (it may never, with ZooKeeper gone)."""


def close_within(client: KazooClient, timeout_s: float = CLOSE_S) -> bool:
    """Blocking: stop and close ``client``, waiting at most ``timeout_s``. A client that cannot reach
    ZooKeeper may never finish stopping; it is left to a daemon thread, so that the process can
    still exit (its session, and every ephemeral node of it, expires on the server). True when it
    closed in time."""

    def close() -> None:
        with contextlib.suppress(Exception):
            client.stop()
            client.close()

    closer = threading.Thread(target=close, name="ferry-zk-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    return not closer.is_alive()
