"""The portal's operations (portal/ops.py) in milliseconds: SQLite for the metadata store, a fake
cluster that records every call, and a fake clock — the reset protocol's order, its refusal when
workers hold on, and its answers to bad input."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ferry import config, db
from ferry.offsets import OffsetState
from ferry.portal.ops import Operations, OpError, parse_target
from ferry.subscription import PartitionRef, Subscription, parse


@dataclass
class FakeCluster:
    """Two partitions of topic t; the owners let go after ``release_after`` looks at them."""

    settings: config.Settings = field(default_factory=lambda: config.load(env={}))
    release_after: int | None = 2
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    epochs: dict[PartitionRef, int] = field(default_factory=dict)
    looks: int = 0

    # the cluster ----------------------------------------------------------------------------
    def kafka_view(self, kafka_cluster: str) -> FakeCluster:
        return self

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        return {"t": 2} if "t" in topics else {}

    def owner(self, ref: PartitionRef) -> dict[str, Any] | None:
        self.looks += 1
        held = self.release_after is None or self.looks <= self.release_after
        return {"worker": "w1", "epoch": 3} if held else None

    def bump_epoch(self, ref: PartitionRef) -> int:
        self.epochs[ref] = self.epochs.get(ref, 3) + 1
        self.calls.append(("bump", ref.partition))
        return self.epochs[ref]

    def touch_subscriptions(self) -> None:
        self.calls.append(("touch",))

    # a Kafka cluster's view ---------------------------------------------------------------------
    def start_offset(self, topic: str, partition: int) -> int:
        return 10

    def end_offset(self, topic: str, partition: int, hint: int = 0) -> int:
        return 500

    def scan(self, topic: str, partition: int, start: int, until_ts_ms: int | None = None) -> int:
        return 42

    def write_state(self, sub: Subscription, ref: PartitionRef, state: OffsetState) -> None:
        self.calls.append(("write", ref.partition, state.committed, state.epoch))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.now += s


def setup(tmp_path: Path, cluster: FakeCluster, state: str = "active") -> tuple[Operations, Any]:
    engine = db.make_engine(f"sqlite:///{tmp_path}/meta.db")
    db.Base.metadata.create_all(engine)
    with db.session(engine) as s:
        db.insert_subscription(
            s, parse({"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/h"}, "state": state})
        )
    clock = Clock()
    ops = Operations(engine, cluster, release_timeout_s=5, clock=clock, sleep=clock.sleep)
    return ops, engine


def audit_actions(engine: Any) -> list[str]:
    with db.session(engine) as s:
        return [e.action for e in reversed(db.recent_audit(s))]


@pytest.mark.parametrize(("to", "committed"), [("earliest", 10), ("latest", 500), (1_700_000_000_000, 42)])
def test_reset_pauses_waits_for_release_then_fences_and_writes(tmp_path: Path, to: Any, committed: int) -> None:
    cluster = FakeCluster()
    ops, engine = setup(tmp_path, cluster)
    answer = asyncio.run(ops.reset("s", to, "alice"))
    assert answer == {
        "name": "s",
        "to": to,
        "partitions": [
            {"topic": "t", "partition": 0, "committed": committed, "epoch": 4},
            {"topic": "t", "partition": 1, "committed": committed, "epoch": 4},
        ],
    }
    # Announced paused; each partition fenced (epoch bumped) before its state is written with
    # that epoch; announced active again.
    assert cluster.calls == [
        ("touch",),
        ("bump", 0),
        ("write", 0, committed, 4),
        ("bump", 1),
        ("write", 1, committed, 4),
        ("touch",),
    ]
    assert cluster.looks > 2  # it waited for the owners to let go
    assert audit_actions(engine) == ["subscription.pause", "subscription.reset", "subscription.resume"]
    assert ops.subscription("s").state == "active"


def test_owners_that_hold_on_refuse_the_reset_and_leave_it_as_it_was(tmp_path: Path) -> None:
    cluster = FakeCluster(release_after=None)
    ops, engine = setup(tmp_path, cluster)
    with pytest.raises(OpError) as err:
        asyncio.run(ops.reset("s", "earliest", "alice"))
    assert (err.value.status, err.value.field) == (409, "to")
    assert not [c for c in cluster.calls if c[0] in ("bump", "write")]  # nothing rewritten
    assert ops.subscription("s").state == "active"
    assert audit_actions(engine) == ["subscription.pause", "subscription.resume"]


def test_a_paused_subscription_stays_paused(tmp_path: Path) -> None:
    cluster = FakeCluster(release_after=0)
    ops, _ = setup(tmp_path, cluster, state="paused")
    asyncio.run(ops.reset("s", "latest", "bob"))
    assert ops.subscription("s").state == "paused"
    assert cluster.calls[-1] == ("touch",)


@pytest.mark.parametrize("bad", ["newest", -1, 1.5, True, None, "0"])
def test_a_target_is_earliest_latest_or_epoch_ms(bad: Any) -> None:
    with pytest.raises(OpError) as err:
        parse_target(bad)
    assert (err.value.status, err.value.field) == (400, "to")


def test_unknown_subscriptions_are_404(tmp_path: Path) -> None:
    ops, _ = setup(tmp_path, FakeCluster())
    with pytest.raises(OpError) as err:
        asyncio.run(ops.reset("nope", "earliest", "alice"))
    assert (err.value.status, err.value.field) == (404, "name")
    with pytest.raises(OpError):
        asyncio.run(ops.set_state("nope", "paused", "alice"))
