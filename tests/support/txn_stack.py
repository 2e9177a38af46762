"""A stack for transactions on the real services: the coordinator and workers (the back-checks) of
:class:`tests.support.cluster.Cluster`, with topics of its own, and gateways started on demand."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ferry import internal
from ferry.devstack.embedded import ServiceProcess
from tests.support.cluster import Cluster, internal_work_env
from tests.support.gateway import gateway_process


def start_gateway(c: Cluster, name: str) -> ServiceProcess:
    """A gateway over the cluster's broker, database and topics of Ferry's own work, started (the
    caller waits for it to be ready, once it can stop it)."""
    topics = {k: v for k, v in c.env.items() if k.startswith("FERRY_") and ("TOPIC" in k or k.startswith("FERRY_TXN_"))}
    return gateway_process(c.tmp, c.bootstrap, c.db_url, name=name, **topics).start()


def txn_owners(c: Cluster) -> dict[int, str]:
    """Transaction-log partition → the worker the leader gave its back-checks to."""
    topic = c.env["FERRY_TXN_TOPIC"]
    return {p: w for (s, t, p), w in c.assignment().items() if s == internal.TXN and t == topic}


class Stack:
    def __init__(self, tmp: Path, zk: str, bootstrap: str, **env: str) -> None:
        # A few transactions prepared in a row should spread over the log's partitions (and so over
        # the workers' back-checks), as they do over time: no sticky partition here.
        defaults = {"FERRY_TXN_MAX_CHECKS": "3", "FERRY_TXN_STICKY_MS": "0"}
        self.c = Cluster(tmp, zk, bootstrap, **internal_work_env(**{**defaults, **env}))
        self.txn_topic = self.c.env["FERRY_TXN_TOPIC"]
        self.c.coordinator("coord")
        self.gateways: list[ServiceProcess] = []

    def gateway(self, name: str) -> ServiceProcess:
        gw = start_gateway(self.c, name)
        self.gateways.append(gw)
        return gw.wait_ready(60)

    def txn_owners(self) -> dict[int, str]:
        return txn_owners(self.c)

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
