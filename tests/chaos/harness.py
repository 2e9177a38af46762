"""The chaos harness: a Ferry stack of real processes, one scenario at a time under a steady keyed load.

    stack = ChaosStack(tmp, zk_port, bootstrap, db_url, endpoint).start()  # 2 coordinators, 3 workers
    with stack.scenario("kill-9-workers") as sc:   # own topic, subscription, load, ownership timeline
        with sc.fault("kill -9 w2", partitions=sc.owned_by("w2")):
            ...                                     # inject, heal; the window ends when delivery resumed
    # leaving the block: load stopped, everything delivered (bounded), subscription paused and
    # released, verdict (tests/chaos/verdict.py) printed, written to $FERRY_CHAOS_REPORT, asserted.

Each worker reaches ZooKeeper through its own :class:`NetSplit`, so one worker can be cut off.
Who pushed each request is known from the connection: the endpoint asks, once per connection,
which process holds the client's end of the socket (``/proc/net/tcp`` inode → ``/proc/<pid>/fd``).
The ownership timeline comes from watches on each partition's ``owner`` node (start: the node's
creation time; end: when the watch saw it go or be replaced).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ferry import zkpaths
from tests.chaos.netsplit import NetSplit
from tests.chaos.verdict import UNKNOWN_OWNER, Delivery, Fault, Owned, Verdict, judge
from tests.support.cluster import Cluster, HealthProcess
from tests.support.endpoint import EndpointRecorder, Reply
from tests.support.kafka import create_topic
from tests.support.load import Trickle
from tests.support.wait import until

SESSION_S = 4.0  # FERRY_ZK_SESSION_TIMEOUT_MS of tests.support.cluster
FLUSH_SLACK_S = 2.0  # acknowledged but not yet in the offsets topic when a worker dies (2 x 200 ms flush + write)


def socket_owner(port: int, server_port: int, pids: dict[int, str]) -> str | None:
    """The name of the process (among ``pids``) holding the loopback connection from ``port``."""
    local, remote = f"0100007F:{port:04X}", f"0100007F:{server_port:04X}"
    inode = None
    with contextlib.suppress(OSError), open("/proc/net/tcp") as f:
        for line in f:
            cols = line.split()
            if len(cols) > 9 and cols[1] == local and cols[2] == remote:
                inode = cols[9]
                break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid, name in list(pids.items()):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return name
    return None


class ChaosStack:
    def __init__(self, tmp: Path, zk_port: int, bootstrap: str, db_url: str, endpoint: EndpointRecorder) -> None:
        self.tmp = tmp
        self.zk_port = zk_port
        self.bootstrap = bootstrap
        self.endpoint = endpoint
        self.cluster = Cluster(tmp, f"127.0.0.1:{zk_port}", bootstrap, db_url=db_url)
        self.splits: dict[str, NetSplit] = {}
        self.workers: dict[str, HealthProcess] = {}
        self.coordinators: dict[str, HealthProcess] = {}
        self.pids: dict[int, str] = {}
        endpoint.identify = lambda port: socket_owner(port, endpoint.port, self._worker_pids())

    def _worker_pids(self) -> dict[int, str]:
        return {p.proc.pid: n for n, p in self.workers.items() if p.proc is not None and p.alive()}

    def start(self, workers: int = 3, coordinators: int = 2) -> ChaosStack:
        for i in range(coordinators):
            self.start_coordinator(f"coord-{i + 1}")
        for i in range(workers):
            self.start_worker(f"w{i + 1}")
        for p in [*self.coordinators.values(), *self.workers.values()]:
            p.wait_ready(90)
        until(lambda: self.cluster.leader() is not None, timeout_s=60, what="a leader")
        until(lambda: set(self.registered()) == set(self.workers), timeout_s=60, what="workers registered")
        return self

    def start_coordinator(self, name: str) -> HealthProcess:
        proc = self.cluster.coordinator(name)
        self.coordinators[name] = proc
        return proc

    def start_worker(self, name: str) -> HealthProcess:
        if name not in self.splits:
            self.splits[name] = NetSplit(self.zk_port).start()
        proc = self.cluster.worker(name, FERRY_ZK_CONNECT=f"127.0.0.1:{self.splits[name].port}")
        self.workers[name] = proc
        return proc

    def registered(self) -> list[str]:
        path = zkpaths.workers(self.cluster.name)
        return list(self.cluster.zk.get_children(path)) if self.cluster.zk.exists(path) else []

    def contenders(self) -> list[str]:
        """Coordinators taking part in the leader election (the leader and the standbys)."""
        path = zkpaths.election(self.cluster.name)
        return list(self.cluster.zk.get_children(path)) if self.cluster.zk.exists(path) else []

    def leader_name(self) -> str | None:
        pid = self.cluster.leader()
        return next((n for n, p in self.coordinators.items() if p.proc and str(p.proc.pid) == pid), None)

    def scenario(self, name: str, **kwargs: Any) -> Scenario:
        return Scenario(self, name, **kwargs)

    def close(self) -> None:
        self.cluster.close()
        for s in self.splits.values():
            s.stop()


class OwnerWatch:
    """The ownership timeline of a topic's partitions for one subscription, from ZooKeeper watches."""

    def __init__(self, cluster: Cluster, sub: str, topic: str, partitions: int, kafka_cluster: str = "default") -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[str, float, int]] = {}  # partition → (worker, start, czxid)
        self._epochs: dict[int, tuple[int, float]] = {}  # partition → (last epoch seen, when)
        self.closed: list[Owned] = []
        self._stopped = False
        self.kafka_cluster = kafka_cluster
        self.add(cluster, sub, topic, range(partitions))

    def add(self, cluster: Cluster, sub: str, topic: str, partitions: Iterable[int]) -> None:
        for p in partitions:
            path = zkpaths.owner(cluster.name, sub, topic, p, self.kafka_cluster)
            cluster.zk.DataWatch(path, self._changed(p))

    def _changed(self, partition: int) -> Any:
        def fn(data: bytes | None, stat: Any, *_: Any) -> bool:
            now = time.time()
            with self._lock:
                if self._stopped:
                    return False
                cur = self._open.get(partition)
                if data is None or stat is None:
                    if cur is not None:
                        self.closed.append(Owned(partition, cur[0], cur[1], now))
                        del self._open[partition]
                    return True
                if cur is not None and cur[2] == stat.czxid:
                    return True
                start = stat.ctime / 1000
                if cur is not None:
                    self.closed.append(Owned(partition, cur[0], cur[1], min(now, start)))
                doc = json.loads(data)
                epoch = int(doc.get("epoch", 0))
                seen = self._epochs.get(partition)
                if seen is not None and epoch > seen[0] + 1:
                    # Owners came and went between two callbacks (each take bumps the epoch): who
                    # owned the partition from the last change seen until this node is unknown.
                    self.closed.append(Owned(partition, UNKNOWN_OWNER, seen[1], start))
                self._epochs[partition] = (epoch, now)
                self._open[partition] = (doc["worker"], start, stat.czxid)
            return True

        return fn

    def owners(self) -> dict[int, str]:
        with self._lock:
            return {p: w for p, (w, _, _) in self._open.items()}

    def timeline(self) -> list[Owned]:
        with self._lock:
            return [*self.closed, *(Owned(p, w, s, None) for p, (w, s, _) in self._open.items())]

    def stop(self) -> None:
        with self._lock:
            self._stopped = True


class Scenario:
    def __init__(
        self,
        stack: ChaosStack,
        name: str,
        partitions: int = 6,
        rate: float = 300,
        keys: int = 48,
        subscription: dict[str, Any] | None = None,
        check_fencing: bool = True,
    ) -> None:
        self.stack = stack
        self.name = name
        self.partitions = partitions
        self.rate = rate
        self.keys = keys
        self.sub = f"{name}-{secrets.token_hex(2)}"
        self.topic = f"chaos-{self.sub}"
        self.sub_doc = {"name": self.sub, "topics": [self.topic], "endpoint": {"url": stack.endpoint.url}}
        self.sub_doc.update(subscription or {})
        self.check_fencing = check_fencing
        self.faults: list[Fault] = []
        self.started = time.time()
        self.verdict: Verdict | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Scenario:
        st = self.stack
        create_topic(st.bootstrap, self.topic, self.partitions)
        st.endpoint.script = lambda r: Reply(200)
        self.watch = OwnerWatch(st.cluster, self.sub, self.topic, self.partitions)
        st.cluster.add_subscription(self.sub_doc)
        until(lambda: len(self.watch.owners()) == self.partitions, timeout_s=60, what=f"{self.sub} owned")
        # Bounded: at most 5 minutes of load, whatever the scenario does.
        cap = int(self.rate * 300)
        self.load = Trickle(st.bootstrap, self.topic, self.partitions, self.rate, self.keys, cap).start()
        self.started = time.time()
        self.wait_flowing(self.started)
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        produced = self.load.stop()
        if exc_type is not None:  # failed or skipped: leave the stack clean for the next scenario
            with contextlib.suppress(Exception):
                self.stack.cluster.set_state(self.sub, "paused")
            self.watch.stop()
            return
        self.stack.endpoint.script = lambda r: Reply(200)
        with contextlib.suppress(AssertionError):  # a shortfall is reported by the verdict, precisely
            until(lambda: produced <= self.delivered(), timeout_s=120, what="every record delivered", interval_s=0.5)
        # Pausing moves the partitions away: proves the catalog and the leader work after the faults.
        self.stack.cluster.set_state(self.sub, "paused")
        until(lambda: not self.watch.owners(), timeout_s=60, what=f"{self.sub} released after pause")
        self.watch.stop()
        self.verdict = judge(
            produced,
            self.log(),
            self.faults,
            slack_s=FLUSH_SLACK_S,
            ownership=self.watch.timeline() if self.check_fencing else None,
        )
        self.report()
        problems = self.verdict.problems()
        assert not problems, f"{self.name}: " + "; ".join(problems)

    # --- what the endpoint saw -----------------------------------------------------------

    def log(self) -> list[Delivery]:
        return [
            Delivery(r.partition, r.offset, r.key, r.at, r.status is not None and 200 <= r.status < 300, r.pusher)
            for r in self.stack.endpoint.snapshot()
            if r.headers.get("ce-kafkatopic") == self.topic
        ]

    def delivered(self) -> set[tuple[int, int]]:
        return {(d.partition, d.offset) for d in self.log() if d.ok}

    def wait_flowing(self, since: float, timeout_s: float = 90.0) -> float:
        """Wait until every partition delivered a record received after ``since``; returns when the last did."""

        def check() -> float | None:
            latest: dict[int, float] = {}
            for d in self.log():
                if d.ok and d.at > since and d.partition not in latest:
                    latest[d.partition] = d.at
            return max(latest.values()) if len(latest) == self.partitions else None

        return until(check, timeout_s=timeout_s, what=f"{self.sub}: every partition delivering again", interval_s=0.2)

    def pushed_by(self, worker: str, partitions: frozenset[int]) -> int:
        """Requests the endpoint knows came from ``worker`` for these partitions (0: the fencing check is blind)."""
        return sum(d.pusher == worker and d.partition in partitions for d in self.log())

    def owners_now(self) -> set[str]:
        return set(self.watch.owners().values())

    def owned_by(self, worker: str) -> frozenset[int]:
        return frozenset(p for p, w in self.watch.owners().items() if w == worker)

    def settled(self, timeout_s: float = 90.0) -> float:
        """Wait until the partitions are owned as the leader assigned them, then delivering; returns when."""

        def converged() -> bool:
            live = set(self.stack.registered())
            assigned = {
                p: w for (s, t, p), w in self.stack.cluster.assignment().items() if s == self.sub and t == self.topic
            }
            # The owner nodes as ZooKeeper holds them now (the watch feeds the fencing timeline; a
            # read is the authority on where things stand).
            owners = self.stack.cluster.owners(self.sub, self.topic, self.partitions)
            return len(assigned) == self.partitions and set(assigned.values()) <= live and owners == assigned

        try:
            until(converged, timeout_s=timeout_s, what=f"{self.sub}: ownership converged", interval_s=0.2)
        except AssertionError as exc:  # what differs, for whoever reads the failure
            assigned = {
                p: w for (s, t, p), w in self.stack.cluster.assignment().items() if s == self.sub and t == self.topic
            }
            held = self.stack.cluster.owners(self.sub, self.topic, self.partitions)
            watched = self.watch.owners()
            differ = {p: (w, held.get(p), watched.get(p)) for p, w in assigned.items() if held.get(p) != w}
            raise AssertionError(
                f"{exc}; live workers {sorted(self.stack.registered())}; partitions (assigned, owner in ZooKeeper,"
                f" owner as watched) that differ: {differ}; assigned {len(assigned)} of {self.partitions}"
            ) from None
        try:
            return self.wait_flowing(time.time(), timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; owners {self.watch.owners()}, last deliveries {self._last()}") from None

    def _last(self) -> dict[int, str]:
        last: dict[int, float] = {}
        for d in self.log():
            last[d.partition] = max(last.get(d.partition, 0.0), d.at)
        return {p: time.strftime("%H:%M:%S", time.localtime(t)) for p, t in sorted(last.items())}

    @contextlib.contextmanager
    def fault(self, kind: str, partitions: frozenset[int] | None = None) -> Iterator[None]:
        """Inject and heal inside the block; the window ends once ownership settled and delivery resumed."""
        start = time.time()
        yield
        end = self.settled()
        self.faults.append(Fault(kind, start, end, partitions))

    # --- figures -------------------------------------------------------------------------

    def report(self) -> None:
        assert self.verdict is not None
        figures = {
            "scenario": self.name,
            **self.verdict.figures(),
            "fault_kinds": sorted({f.kind.split(" ")[0] for f in self.faults}),
            "seconds": round(time.time() - self.started, 1),
            "rate": self.rate,
            "partitions": self.partitions,
        }
        print(f"\nchaos {json.dumps(figures)}")
        path = os.environ.get("FERRY_CHAOS_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(figures) + "\n")
