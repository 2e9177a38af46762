"""The ZooKeeper client every Ferry service uses, with its one retry policy.

Connection loss is retried forever with a short capped backoff (a service waits for ZooKeeper
rather than dying; its session timeout decides when others take its work), and each command a
few times, so a brief leader election inside the ensemble is not an error. The coordinator, the
workers and the portal all connect through :func:`make_client`.
"""

from __future__ import annotations

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
