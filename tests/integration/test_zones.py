"""Zones and two Kafka clusters on the real stack (docs/zones.md): two embedded brokers as the
clusters ``default`` (zone dc1) and ``dc2`` (zone dc2), workers in both zones, one subscription
over both clusters.

- Every record of both clusters is pushed, each cluster's only by its own zone's workers (the
  pushing process of every request is found from its socket).
- kill -9 of every dc2 worker: dc2's partitions move to dc1 within the session timeout + 2 s and
  nothing is lost; the dc2 workers return: the partitions move back, and no record acknowledged
  before that is pushed again.
- The dc2 broker frozen for 10 s: the default cluster's records keep flowing without a pause.
- A dc2 record retried through the retry topic (in ``default``), durably or redriven from its dead
  letter, stays dc2's: pushed with ``ce-kafkacluster: dc2`` and its original ``ce-id`` (which
  default's record at the same place also has), dead-lettered again in dc2, never in default.
"""

from __future__ import annotations

import json
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ferry import kafka, zkpaths
from ferry.devstack import embedded
from tests.chaos.harness import socket_owner
from tests.support.cluster import Cluster, HealthProcess, internal_work_env
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, produce
from tests.support.load import Trickle
from tests.support.wait import until

pytestmark = pytest.mark.integration

PARTS = 4
SESSION_S = 4.0
ADMIN = "zones-admin"


class Zones:
    """A Ferry cluster whose workers live in dc1 and dc2, with their pushes told apart."""

    def __init__(self, tmp: Path, zk: str, default: str, dc2: str, endpoint: EndpointRecorder, **env: str) -> None:
        clusters = {"dc2": {"bootstrap": dc2, "zone": "dc2"}}
        self.c = Cluster(
            tmp, zk, default, FERRY_KAFKA_CLUSTERS=json.dumps(clusters), FERRY_DEFAULT_KAFKA_ZONE="dc1", **env
        )
        self.bootstrap = {"default": default, "dc2": dc2}
        self.workers: dict[str, HealthProcess] = {}
        self.endpoint = endpoint
        endpoint.identify = lambda port: socket_owner(port, endpoint.port, self._pids())

    def _pids(self) -> dict[int, str]:
        return {p.proc.pid: n for n, p in self.workers.items() if p.proc is not None and p.alive()}

    def worker(self, name: str, zone: str) -> HealthProcess:
        self.workers[name] = self.c.worker(name, FERRY_ZONE=zone)
        return self.workers[name]

    def owners(self, sub: str, topic: str, cluster: str) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for p in range(PARTS):
            path = zkpaths.owner(self.c.name, sub, topic, p, cluster)
            stat = self.c.zk.exists(path)
            out[p] = json.loads(self.c.zk.get(path)[0])["worker"] if stat else None
        return out

    def portal(self) -> httpx.Client:
        """A portal over the same ZooKeeper, database and clusters, and a client of its API."""
        port = embedded.free_port()
        env = {**self.c.env, "FERRY_PORTAL_PORT": str(port), "FERRY_ADMIN_TOKEN": ADMIN}
        proc = embedded.python_module("portal", ["portal"], self.c.tmp / "portal.log", env=env).start()
        self.c.processes.append(proc)
        until(lambda: embedded.port_open(port), timeout_s=30, what="the portal listening")
        return httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/v1", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        )

    def close(self) -> None:
        self.c.close()


@pytest.fixture()
def zones(
    tmp_path: Path,
    zk_connect: str,
    kafka_bootstrap: str,
    own_broker: embedded.ServiceProcess,
    endpoint: EndpointRecorder,
) -> Iterator[Zones]:
    z = Zones(tmp_path, zk_connect, kafka_bootstrap, f"127.0.0.1:{own_broker.port}", endpoint)
    try:
        yield z
    finally:
        z.close()


def until_dead_lettered(api: httpx.Client, sub: str, record: str, cluster: str, timeout_s: float = 10) -> None:
    """Wait until the trace of ``record`` (``topic/partition/offset``) in ``cluster`` says
    ``dead_lettered``: it reads the workers' stats, published every second, so it may show the
    last push in flight for up to that long after the dead letter is written."""
    until(
        lambda: (
            api.get(f"/subscriptions/{sub}/records/{record}", params={"cluster": cluster}).json()["state"]
            == "dead_lettered"
        ),
        timeout_s=timeout_s,
        what=f"the trace of {cluster}'s record {record} says dead_lettered",
    )


def cluster_of(r: Received) -> str:
    return r.headers.get("ce-kafkacluster", "default")


def where(r: Received) -> tuple[str, int, int]:
    return (cluster_of(r), r.partition, r.offset)


def handoffs(z: Zones, topic: str) -> str:
    """The workers' log lines about handing ``topic``'s partitions over, one per line."""
    events = ("partition.acquired", "partition.released", "partition.drain_timeout", "final_state_unconfirmed")
    return "\n".join(
        f"{name}: {line[:400]}"
        for name, w in z.workers.items()
        for line in w.log_path.read_text().splitlines()
        if topic in line and any(e in line for e in events)
    )


def start(z: Zones, topic: str) -> None:
    for name in z.bootstrap.values():
        create_topic(name, topic, PARTS)
    z.c.add_subscription(
        {
            "name": "zones",
            "topics": [topic],
            "endpoint": {"url": z.endpoint.url},
            "clusters": ["default", "dc2"],
            "max_in_flight": 16,
        }
    )
    z.c.coordinator()
    for name, zone in (("a1", "dc1"), ("a2", "dc1"), ("b1", "dc2"), ("b2", "dc2")):
        z.worker(name, zone)
    for w in z.workers.values():
        w.wait_ready(60)
    seen: dict[str, dict[int, str | None]] = {}

    def settled() -> bool:
        for cluster, zone_workers in (("default", {"a1", "a2"}), ("dc2", {"b1", "b2"})):
            seen[cluster] = z.owners("zones", topic, cluster)
            if set(seen[cluster].values()) != zone_workers:
                return False
        return True

    try:
        until(settled, timeout_s=40, what="each cluster's partitions owned by its zone's workers")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; owners seen last: {seen}, assignment: {z.c.assignment()}") from None


def test_one_subscription_over_two_clusters_failover_and_failback(zones: Zones) -> None:
    z = zones
    topic = f"zn-{secrets.token_hex(3)}"
    start(z, topic)
    loads = {c: Trickle(b, topic, PARTS, rate=100, keys=16).start() for c, b in z.bootstrap.items()}
    try:
        z.endpoint.wait_for(
            lambda rs: {cluster_of(r) for r in rs if r.status == 200} == {"default", "dc2"},
            timeout_s=30,
            what="records of both clusters",
        )
        # kill -9 every dc2 worker: dc2's partitions go to dc1 within the session timeout + 2 s.
        killed_at = time.time()
        for name in ("b1", "b2"):
            z.workers[name].kill()
        until(
            lambda: set(z.owners("zones", topic, "dc2").values()) <= {"a1", "a2"},
            timeout_s=SESSION_S + 2 + 5,
            what="dc2's partitions owned by dc1's workers",
        )
        failover_s = time.time() - killed_at
        print(f"zones: dc2's partitions owned in dc1 {failover_s:.2f} s after kill -9 (session {SESSION_S} s)")
        assert failover_s < SESSION_S + 2
        z.endpoint.wait_for(
            lambda rs: any(cluster_of(r) == "dc2" and r.at > killed_at + failover_s and r.status == 200 for r in rs),
            timeout_s=15,
            what="dc2's records pushed from dc1",
        )
        # Let dc1 redeliver what dc2's killed workers had pushed since their last offset flush
        # (at-least-once), so that every push after the failback can be told apart.
        so_far = {("dc2", p, o) for p, o in loads["dc2"].confirmed_now()}
        z.endpoint.wait_for(
            lambda rs: so_far <= {where(r) for r in rs if r.status == 200},
            timeout_s=30,
            what="dc2's records so far acknowledged by dc1",
        )
        # dc2's workers return: the partitions move back, one fenced handoff each.
        back_at = time.time()
        for name in ("b1", "b2"):
            z.worker(name, "dc2").wait_ready(60)
        until(
            lambda: set(z.owners("zones", topic, "dc2").values()) == {"b1", "b2"},
            timeout_s=40,
            what="dc2's partitions back on dc2's workers",
        )
        until(lambda: time.time() > back_at + 3, timeout_s=30, what="3 s of load after the failback")
        # dc1's workers opened dc2's clients for the failover and closed them once they owned none.
        logs = [z.workers[n].log_path for n in ("a1", "a2")]
        assert any('kafka_cluster.opened cluster="dc2"' in p.read_text() for p in logs)
        until(
            lambda: all(
                p.read_text().count('kafka_cluster.opened cluster="dc2"')
                == p.read_text().count('kafka_cluster.closed cluster="dc2"')
                for p in logs
            ),
            timeout_s=20,
            what="dc1's workers closing dc2's clients",
        )
    finally:
        confirmed = {c: load.stop() for c, load in loads.items()}

    # Nothing lost: every confirmed record of both clusters acknowledged.
    want = {(c, p, o) for c, recs in confirmed.items() for p, o in recs}
    z.endpoint.wait_for(
        lambda rs: want <= {where(r) for r in rs if r.status == 200},
        timeout_s=60,
        what="every confirmed record of both clusters acknowledged",
    )
    got = z.endpoint.snapshot()
    # Each cluster's records were pushed by its own zone's workers, but while dc2 had none.
    dc1, dc2 = {"a1", "a2"}, {"b1", "b2"}
    identified = [r for r in got if r.pusher is not None]
    assert len(identified) > 0.9 * len(got), "the pushing worker was not found for most requests"
    assert all(r.pusher in dc1 for r in identified if cluster_of(r) == "default"), "dc2 pushed default's records"
    before_kill = [r for r in identified if cluster_of(r) == "dc2" and r.at < killed_at]
    assert before_kill and all(r.pusher in dc2 for r in before_kill), "dc1 pushed dc2's records while dc2 had workers"
    # The failback handed partitions over gracefully: nothing acknowledged before it came again.
    acked_before: dict[tuple[str, int, int], float] = {}
    for r in got:
        if r.status == 200:
            acked_before.setdefault(where(r), r.at)
    again = [r for r in got if r.at > back_at and where(r) in acked_before and acked_before[where(r)] < back_at]
    if again:  # say enough to tell an unconfirmed final offset write (at-least-once) from a bug
        first = again[0]
        raise AssertionError(
            f"{len(again)} acknowledged records pushed again after the failback (at {back_at:.3f}), e.g. "
            f"{where(first)}: acknowledged at {acked_before[where(first)]:.3f}, again at {first.at:.3f} by "
            f"{first.pusher}; the handoffs:\n{handoffs(z, topic)}"
        )
    after = [r for r in got if cluster_of(r) == "dc2" and r.at > back_at + 15 and r.pusher is not None]
    assert all(r.pusher in dc2 for r in after)


def test_a_frozen_cluster_does_not_pause_the_other(zones: Zones, own_broker: embedded.ServiceProcess) -> None:
    z = zones
    topic = f"zf-{secrets.token_hex(3)}"
    start(z, topic)
    load = Trickle(z.bootstrap["default"], topic, PARTS, rate=100, keys=16).start()
    frozen = False
    api = z.portal()
    try:
        z.endpoint.wait_for(lambda rs: len(rs) > 50, timeout_s=30, what="records flowing")
        assert own_broker.proc is not None
        own_broker.kill(signal.SIGSTOP)
        frozen = True
        frozen_at = time.time()
        # The portal still shows the default cluster's partitions, and says why dc2's are missing.
        status = api.get("/subscriptions/zones/status")
        assert status.status_code == 200, status.text
        assert {r["cluster"] for r in status.json()["partitions"]} == {"default"}
        assert [w for w in status.json()["warnings"] if "'dc2' cannot be read now" in w], status.json()
        until(lambda: time.time() > frozen_at + 10, timeout_s=30, what="10 s with dc2's broker frozen")
        own_broker.kill(signal.SIGCONT)
        frozen = False
        thawed_at = time.time()
    finally:
        if frozen:
            own_broker.kill(signal.SIGCONT)
        api.close()
        confirmed = load.stop()
    z.endpoint.wait_for(
        lambda rs: {("default", p, o) for p, o in confirmed} <= {where(r) for r in rs if r.status == 200},
        timeout_s=60,
        what="every record of the default cluster acknowledged",
    )
    times = sorted(r.at for r in z.endpoint.snapshot() if cluster_of(r) == "default" and frozen_at <= r.at <= thawed_at)
    gaps = [b - a for a, b in zip([frozen_at, *times], [*times, thawed_at], strict=True)]
    print(f"zones: with dc2 frozen 10 s, {len(times)} default pushes, longest gap {max(gaps):.2f} s")
    assert max(gaps) < 1.0, f"the default cluster paused {max(gaps):.2f} s while dc2's broker was frozen"


def test_the_portal_shows_zones_and_clusters(zones: Zones) -> None:
    z = zones
    topic = f"zp-{secrets.token_hex(3)}"
    z.endpoint.script = lambda r: Reply(400) if r.key == "poison" else Reply(200)
    start(z, topic)
    for name, bootstrap in z.bootstrap.items():
        produce(bootstrap, topic, [(f"{name}{i}".encode(), b"x", i % PARTS) for i in range(8)])
    produce(z.bootstrap["dc2"], topic, [(b"poison", b"bad", 1)])  # 400: a dead letter, in dc2
    z.endpoint.wait_for(lambda rs: len({where(r) for r in rs if r.status == 200}) >= 16, timeout_s=30, what="16 acks")
    with z.portal() as api:
        workers = api.get("/workers").json()["workers"]
        assert {w["id"]: w["zone"] for w in workers} == {"a1": "dc1", "a2": "dc1", "b1": "dc2", "b2": "dc2"}
        dc2_parts = [p for w in workers for p in w["partitions"] if p.get("cluster") == "dc2"]
        assert len(dc2_parts) == PARTS and all(p["topic"] == topic for p in dc2_parts)

        def settled() -> list[dict] | None:  # type: ignore[type-arg]
            rows = api.get("/subscriptions/zones/status").json()["partitions"]
            return rows if sum(r["committed"] or 0 for r in rows) == 17 else None

        rows = until(settled, timeout_s=20, what="both clusters' partitions committed in the status")
        assert sorted((r["cluster"], r["partition"]) for r in rows) == sorted(
            (c, p) for c in ("default", "dc2") for p in range(PARTS)
        )
        assert all(r["worker"] in ({"a1", "a2"} if r["cluster"] == "default" else {"b1", "b2"}) for r in rows)
        traced = api.get(f"/subscriptions/zones/records/{topic}/0/0", params={"cluster": "dc2"}).json()
        assert traced["cluster"] == "dc2" and traced["state"] == "delivered"
        assert api.get(f"/subscriptions/zones/records/{topic}/0/0").json()["cluster"] == "default"
        unknown = api.get(f"/subscriptions/zones/records/{topic}/0/0", params={"cluster": "dc9"})
        assert unknown.status_code == 404 and unknown.json()["field"] == "cluster"
        assert "reads only: default, dc2" in unknown.json()["error"]
        # A wrong type or an unknown field is refused, never taken for "every cluster".
        wrong = api.post("/subscriptions/zones/dead-letters/replay", json={"cluster": 5})
        assert (wrong.status_code, wrong.json()["field"]) == (400, "cluster")
        extra = api.post("/subscriptions/zones/reset", json={"to": "latest", "clusters": "dc2"})
        assert (extra.status_code, extra.json()["field"]) == (400, "clusters")
        elsewhere = api.post("/subscriptions/zones/reset", json={"to": "latest", "cluster": "dc9"})
        assert (elsewhere.status_code, elsewhere.json()["field"]) == (404, "cluster")
        # The dead letter is in dc2's dead-letter topic, not in default's; redriven once.
        until(
            lambda: api.get("/subscriptions/zones/dead-letters", params={"cluster": "dc2"}).json()["dead_letters"],
            timeout_s=20,
            what="dc2's dead letter listed",
        )
        listed = api.get("/subscriptions/zones/dead-letters", params={"cluster": "dc2"}).json()["dead_letters"]
        assert [(d["key"], d["source_partition"], d["redriven"]) for d in listed] == [("poison", 1, False)]
        assert api.get("/subscriptions/zones/dead-letters").json()["dead_letters"] == []
        assert api.post("/subscriptions/zones/dead-letters/replay", json={"cluster": "dc2"}).json()["replayed"] == 1
        again = api.post("/subscriptions/zones/dead-letters/replay", json={"cluster": "dc2"}).json()
        assert (again["replayed"], again["already_redriven"]) == (0, 1)
        z.endpoint.wait_for(
            lambda rs: sum(1 for r in rs if r.key == "poison") >= 2, timeout_s=30, what="the redriven record pushed"
        )
        # Read from the retry topic in default by a dc1 worker, it is still dc2's record: same id,
        # same cluster, and it fails into dc2's dead-letter topic again.
        first, redriven = [r for r in z.endpoint.received if r.key == "poison"][:2]
        assert (redriven.ce_id, cluster_of(redriven)) == (first.ce_id, "dc2") == (f"{topic}/1/2", "dc2")
        # Pushed as first read (docs/delivery.md): its own topic, not the retry topic, and the
        # same CloudEvents attributes as its first push (attempt 1 again).
        assert redriven.headers["ce-kafkatopic"] == topic and redriven.pusher in {"a1", "a2"}
        ce = [{k: v for k, v in r.headers.items() if k.startswith("ce-")} for r in (first, redriven)]
        assert ce[1] == ce[0]
        two = until(
            lambda: (
                d
                if len(
                    d := api.get("/subscriptions/zones/dead-letters", params={"cluster": "dc2"}).json()["dead_letters"]
                )
                == 2
                else None
            ),
            timeout_s=20,
            what="the redriven record dead-lettered in dc2 again",
        )
        assert [(d["source_topic"], d["source_partition"], d["source_offset"]) for d in two] == [(topic, 1, 2)] * 2
        assert api.get("/subscriptions/zones/dead-letters").json()["dead_letters"] == []
        until_dead_lettered(api, "zones", f"{topic}/1/2", "dc2")
        assert api.get(f"/subscriptions/zones/records/{topic}/1/2").json()["state"] != "dead_lettered"
        # A reset of one cluster moves only that cluster's partitions.
        only = api.post("/subscriptions/zones/reset", json={"to": "latest", "cluster": "dc2"}, timeout=90)
        assert only.status_code == 200, only.text
        assert {(p.get("cluster"), p["topic"]) for p in only.json()["partitions"]} == {("dc2", topic)}
        bad = {"name": "bad", "topics": [topic], "endpoint": {"url": z.endpoint.url}, "clusters": ["default", "dc3"]}
        refused = api.post("/subscriptions", json=bad)
        assert refused.status_code == 400 and refused.json()["field"] == "clusters[1]"
        assert "FERRY_KAFKA_CLUSTERS" in refused.json()["error"]


def test_retries_through_the_retry_topic_keep_the_records_cluster(
    tmp_path: Path,
    zk_connect: str,
    kafka_bootstrap: str,
    own_broker: embedded.ServiceProcess,
    endpoint: EndpointRecorder,
) -> None:
    """The record at ``<topic>/0/0`` exists in both clusters. dc2's never succeeds: its durable
    retry and its redrive, both read from ``<sub>.retry`` in default, are pushed as dc2's and
    dead-lettered in dc2; default's record at the same place is delivered once and never
    dead-lettered."""
    dc2 = f"127.0.0.1:{own_broker.port}"
    z = Zones(tmp_path, zk_connect, kafka_bootstrap, dc2, endpoint, **internal_work_env())
    try:
        topic = f"zr-{secrets.token_hex(3)}"
        for bootstrap in z.bootstrap.values():
            create_topic(bootstrap, topic, 1)
        endpoint.script = lambda r: Reply(503) if r.key == "never" else Reply(200)
        z.c.add_subscription(
            {
                "name": "zr",
                "topics": [topic],
                "endpoint": {"url": endpoint.url},
                "clusters": ["default", "dc2"],
                "ordering": "none",
                "retry": {"mode": "durable", "max_attempts": 2, "initial_backoff_ms": 200, "max_backoff_ms": 200},
            }
        )
        z.c.coordinator()
        z.worker("a1", "dc1").wait_ready(60)  # no dc2 worker: dc2's partition is planned on a1
        produce(kafka_bootstrap, topic, [(b"fine", b"d", 0)])
        produce(dc2, topic, [(b"never", b"x", 0)])

        def dead_letters(cluster: str) -> list[Any]:
            got: list[Any] = []
            kafka.read_to_end({"bootstrap.servers": z.bootstrap[cluster]}, "zr.dlq", got.append)
            return got

        dead = until(lambda: dead_letters("dc2"), timeout_s=60, what="dc2's record dead-lettered in dc2")
        pushes = [r for r in endpoint.received if r.key == "never"]
        assert [(r.ce_id, cluster_of(r), r.attempt, r.headers["ce-kafkatopic"]) for r in pushes] == [
            (f"{topic}/0/0", "dc2", 1, topic),
            (f"{topic}/0/0", "dc2", 2, topic),  # the durable retry, from default's retry topic, as first read
        ]
        headers = dict(dead[0].headers())
        assert (headers["ferry-source-topic"], headers["ferry-source-offset"]) == (topic.encode(), b"0")
        assert headers["ferry-source-cluster"] == b"dc2"

        endpoint.script = lambda r: Reply(400) if r.key == "never" else Reply(200)
        with z.portal() as api:
            assert api.post("/subscriptions/zr/dead-letters/replay", json={"cluster": "dc2"}).json()["replayed"] == 1
            endpoint.wait_for(lambda rs: sum(r.key == "never" for r in rs) >= 3, timeout_s=30, what="the redrive")
            until(lambda: len(dead_letters("dc2")) == 2, timeout_s=30, what="the redriven record dead-lettered in dc2")
            redriven = [r for r in endpoint.received if r.key == "never"][2]
            assert (redriven.ce_id, cluster_of(redriven)) == (f"{topic}/0/0", "dc2")
            assert dead_letters("default") == []
            assert [r.ce_id for r in endpoint.received if cluster_of(r) == "default"] == [f"{topic}/0/0"]
            traced = api.get(f"/subscriptions/zr/records/{topic}/0/0").json()
            assert (traced["cluster"], traced["state"]) == ("default", "delivered")
            until_dead_lettered(api, "zr", f"{topic}/0/0", "dc2")
    finally:
        z.close()
