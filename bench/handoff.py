"""Per-partition delivery stall during a rolling restart: Ferry's fenced handoff vs a plain
confluent-kafka consumer group (eager and cooperative-sticky assignors), same load, one run.

Run: python3 bench/handoff.py [--partitions 12] [--rate 600] [--workers 3]
The stall of a partition is the longest gap between first deliveries of its records while the
members are restarted one by one (SIGTERM, then a replacement starts).
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results
from ferry.devstack import embedded
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder, Received
from tests.support.kafka import create_topic
from tests.support.load import Trickle
from tests.support.wait import until


def stalls(received: list[Received], since: float, until_t: float) -> list[float]:
    times: dict[int, list[float]] = defaultdict(list)
    seen: set[str] = set()
    for r in received:
        if r.ce_id in seen:
            continue
        seen.add(r.ce_id)
        if since <= r.at <= until_t:
            times[int(r.ce_id.rsplit("/", 2)[1])].append(r.at)
    return [max((b - a for a, b in itertools.pairwise(ts)), default=0.0) for ts in times.values()]


def assigned_to(cluster: Cluster, live: set[str]) -> bool:
    """Whether the leader's published assignment spreads over exactly the members ``live``."""
    return set(cluster.assignment().values()) == live


def ferry_run(tmp: Path, zk: str, bootstrap: str, a: argparse.Namespace) -> tuple[list[float], int]:
    with EndpointRecorder() as ep:
        cluster = Cluster(tmp / "ferry", zk, bootstrap)
        try:
            topic = f"ho-{secrets.token_hex(3)}"
            create_topic(bootstrap, topic, a.partitions)
            cluster.add_subscription({"name": "ho", "topics": [topic], "endpoint": {"url": ep.url}})
            cluster.coordinator()
            names = [f"w{i}" for i in range(a.workers)]
            procs = {n: cluster.worker(n) for n in names}
            until(lambda: set(cluster.assignment().values()) == set(names), timeout_s=60, what="assigned")
            load = Trickle(bootstrap, topic, a.partitions, rate=a.rate, keys=a.partitions * 8).start()
            ep.wait_for(lambda rs: len(rs) > a.rate * 2, timeout_s=60)
            started = time.time()
            for n in list(names):
                procs[n].stop(grace_s=30)
                procs[n] = cluster.worker(n + "b")
                names = [m if m != n else n + "b" for m in names]
                until(partial(assigned_to, cluster, set(names)), timeout_s=60)
                until(lambda: all(cluster.owners("ho", topic, a.partitions).values()), timeout_s=60)
                time.sleep(1.0)  # settle: the measurement runs on a steady load between restarts
            ended = time.time()
            load.stop()
            return stalls(ep.snapshot(), started, ended), len(ep.snapshot())
        finally:
            cluster.close()


def group_run(tmp: Path, bootstrap: str, a: argparse.Namespace, strategy: str) -> tuple[list[float], int]:
    with EndpointRecorder() as ep:
        topic = f"grp-{secrets.token_hex(3)}"
        group = f"g-{secrets.token_hex(3)}"
        create_topic(bootstrap, topic, a.partitions)

        def member(i: int) -> embedded.ServiceProcess:
            argv = [
                sys.executable,
                str(Path(__file__).parent / "_group_consumer.py"),
                bootstrap,
                topic,
                group,
                strategy,
                ep.url,
            ]
            return embedded.ServiceProcess(f"m{i}", argv, 0, tmp / f"{strategy}-m{i}.log").start()

        members = [member(i) for i in range(a.workers)]
        load = Trickle(bootstrap, topic, a.partitions, rate=a.rate, keys=a.partitions * 8).start()
        try:
            ep.wait_for(
                lambda rs: len({r.ce_id.rsplit("/", 2)[1] for r in rs}) == a.partitions,
                timeout_s=90,
                what="every partition consumed by the group",
            )
            started = time.time()
            for i in range(a.workers):
                members[i].stop(grace_s=30)
                members[i] = member(a.workers + i)
                time.sleep(8.0)  # no ownership signal to wait on in a plain group: give each rebalance time
            ended = time.time()
        finally:
            load.stop()
            for m in members:
                m.stop()
        return stalls(ep.snapshot(), started, ended), len(ep.snapshot())


def summary(xs: list[float]) -> tuple[float, float, float] | None:
    """Median, p95 and max of the stalls; None without any."""
    if not xs:
        return None
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(0.95 * len(xs)))], xs[-1]


def row(label: str, xs: list[float]) -> str:
    s = summary(xs)
    if s is None:
        return f"{label:34} (no data)"
    return f"{label:34} {s[0]:8.3f} {s[1]:8.3f} {s[2]:8.3f}"


TABLE_ROWS = {
    "ferry (fenced handoff)": "Ferry (fenced handoff)",
    "consumer group (range)": "consumer group, eager (range)",
    "consumer group (cooperative-sticky)": "consumer group, cooperative-sticky",
}
"""The printed rows' labels → the result table's."""


def save(ap: argparse.ArgumentParser, a: argparse.Namespace, results: dict[str, tuple[list[float], int]]) -> None:
    """The table: a row that did not run, or saw no stall measured, keeps its label with "—" cells."""
    rows = []
    missing = []
    for label, shown in TABLE_ROWS.items():
        s = summary(results[label][0]) if label in results else None
        if s is None:
            missing.append(shown)
            rows.append([shown, "—", "—", "—"])
        else:
            rows.append([shown, *(f"{x:.3f}" for x in s)])
    note = f"{a.partitions:,} partitions, {a.rate:,g} records/s, {a.workers} members restarted one by one"
    if missing:
        note += f"; no data: {', '.join(missing)}"
    _results.save(
        "handoff",
        _results.command_line("python3 bench/handoff.py", ap, a),
        ["per-partition stall in a rolling restart (s)", "median", "p95", "max"],
        rows,
        note,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rate", type=float, default=600)
    ap.add_argument("--workers", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-handoff-"))
    zk = embedded.zookeeper(tmp / "zk").start().wait_ready(60)
    broker = embedded.kafka_broker(tmp / "kafka").start().wait_ready(30)
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        results = {"ferry (fenced handoff)": ferry_run(tmp, f"127.0.0.1:{zk.port}", bootstrap, a)}
        for strategy in ("range", "cooperative-sticky"):
            try:
                results[f"consumer group ({strategy})"] = group_run(tmp, bootstrap, a, strategy)
            except AssertionError as exc:
                print(f"consumer group ({strategy}) did not run on this broker: {exc}")
        print(f"rolling restart of {a.workers} members, {a.partitions} partitions, {a.rate:.0f} records/s")
        print(f"per-partition stall (s){'':11} {'median':>8} {'p95':>8} {'max':>8}")
        for label, (xs, _) in results.items():
            print(row(label, xs))
        save(ap, a, results)
    finally:
        broker.stop()
        zk.stop()


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
