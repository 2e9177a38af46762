"""A stack for transactions on the real services: the coordinator and workers (the back-checks) of
:class:`tests.support.cluster.Cluster`, with topics of its own, and gateways started on demand."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

from ferry import internal
from ferry.devstack.embedded import ServiceProcess
from tests.support.cluster import Cluster
from tests.support.gateway import gateway_process


class Stack:
    def __init__(self, tmp: Path, zk: str, bootstrap: str, **env: str) -> None:
        tag = secrets.token_hex(3)
        self.bootstrap = bootstrap
        self.txn_topic = f"txn-{tag}"
        self.c = Cluster(
            tmp,
            zk,
            bootstrap,
            FERRY_INTERNAL_WORK="true",
            FERRY_DELAY_TOPIC=f"delay-{tag}",
            FERRY_TXN_TOPIC=self.txn_topic,
            FERRY_IDEMPOTENCY_TOPIC=f"idem-{tag}",
            **{"FERRY_TXN_MAX_CHECKS": "3", **env},
        )
        self.c.coordinator("coord")
        self.gateways: list[ServiceProcess] = []

    def gateway(self, name: str) -> ServiceProcess:
        topics = {k: v for k, v in self.c.env.items() if k.startswith("FERRY_") and "TOPIC" in k}
        gw = gateway_process(self.c.tmp, self.bootstrap, self.c.db_url, name=name, **topics).start()
        self.gateways.append(gw)
        gw.wait_ready(60)
        return gw

    def txn_owners(self) -> dict[int, str]:
        """Transaction-log partition → the worker the leader gave its back-checks to."""
        return {p: w for (s, t, p), w in self.c.assignment().items() if s == internal.TXN and t == self.txn_topic}

    def close(self) -> None:
        for gw in self.gateways:
            gw.stop()
        self.c.close()


@contextlib.contextmanager
def running(tmp: Path, zk: str, bootstrap: str, **env: str) -> Iterator[Stack]:
    """A :class:`Stack`, closed (every process stopped) when the block ends."""
    st = Stack(tmp, zk, bootstrap, **env)
    try:
        yield st
    finally:
        st.close()
