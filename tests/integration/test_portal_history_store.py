"""The portal's history in a real database (SQLite and MariaDB): replicas share one history, take
each sample once, keep an hour, and a restarted portal still has it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ferry import db
from ferry.migrations import runner
from ferry.portal.history_store import HistoryStore
from ferry.subscription import PartitionRef

pytestmark = pytest.mark.integration

A0 = PartitionRef("orders", "t", 0)
A1 = PartitionRef("orders", "t", 1)
T0 = 1_800_000_000_000  # a bucket boundary of 10 s


def report(worker: str = "w1", epoch: int = 1, **figures: Any) -> dict[str, Any]:
    return {"worker": worker, "epoch": epoch, "delivered": 0, "retried": 0, "dead_lettered": 0, "lag": 0, **figures}


@pytest.fixture(params=["sqlite", "mariadb"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    sqlite = f"sqlite:///{tmp_path}/ferry.db"
    url = sqlite if request.param == "sqlite" else str(request.getfixturevalue("mariadb_url"))
    runner.upgrade(url)
    engine = db.make_engine(url)
    with db.session(engine) as s:  # the MariaDB database is shared by the run's tests
        s.execute(sa.delete(db.HistoryPoint))
        s.execute(sa.delete(db.HistorySample))
    yield engine
    engine.dispose()


def test_replicas_take_each_sample_once_and_measure_against_each_others(engine: Any) -> None:
    a, b = HistoryStore(engine, 10, "portal-a:8080"), HistoryStore(engine, 10, "portal-b:8080")
    assert a.record(T0, {A0: report(delivered=1_000)})
    assert b.taken(T0 + 3_000) and not b.record(T0 + 3_000, {A0: report(delivered=1_050)})
    assert not b.taken(T0 + 10_000)
    assert b.record(T0 + 10_000, {A0: report(delivered=1_200, lag=7), A1: report(worker="w2", dead_lettered=3)})
    assert a.record(T0 + 20_000, {A0: report(delivered=1_500, lag=4), A1: report(worker="w2", dead_lettered=3)})

    for replica in (a, b, HistoryStore(engine, 10, "portal-c:8080")):  # c: a restarted portal
        points, parts = replica.hour("orders", T0 + 25_000)
        assert [(p.delivered, p.lag) for p in points] == [(0, 0), (200, 7), (300, 4)]
        assert [p.delivered_per_s for p in points] == [0, 20.0, 30.0]
        assert [p.dead_lettered for p in parts[A1]] == [3, 0]  # taken over between samples, then steady
        (row,) = replica.summaries([("orders", "active")], T0 + 25_000)
        assert (row["health"], row["lag"], row["dead_lettered_1h"]) == ("failing", 4, 3)
    with engine.connect() as conn:
        taken = conn.execute(sa.select(db.HistorySample.taken_by).order_by(db.HistorySample.bucket)).scalars().all()
    assert taken == ["portal-a:8080", "portal-b:8080", "portal-a:8080"]


def test_replicas_racing_for_the_same_buckets_take_each_once(engine: Any) -> None:
    stores = [HistoryStore(engine, 10, f"portal-{i}:8080") for i in range(2)]
    won: list[list[bool]] = [[], []]

    def race(i: int, barrier: threading.Barrier) -> None:
        for n in range(10):
            barrier.wait(timeout=30)
            won[i].append(stores[i].record(T0 + n * 10_000 + i, {A0: report(delivered=100 * n)}))

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=race, args=(i, barrier)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [x + y for x, y in zip(*won, strict=True)] == [1] * 10
    points, _ = stores[0].hour("orders", T0 + 100_000)
    assert len(points) == 10 and sum(p.delivered for p in points) == 900  # no count twice, none lost


def test_an_hour_is_kept_and_older_samples_are_dropped(engine: Any) -> None:
    store = HistoryStore(engine, 10, "portal-a:8080")
    for i in range(400):
        store.record(T0 + i * 10_000, {A0: report(delivered=i)})
    now = T0 + 399 * 10_000
    points, _ = store.hour("orders", now)
    assert len(points) == 360 and points[0].t_ms == T0 + 40 * 10_000
    with engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.count()).select_from(db.HistorySample)).scalar()
    assert kept is not None and kept <= 363


def test_a_deleted_subscription_takes_its_history_along(engine: Any) -> None:
    store = HistoryStore(engine, 10, "portal-a:8080")
    store.record(T0, {A0: report(), PartitionRef("billing", "t", 0): report()})
    with db.session(engine) as s:
        db.forget_history(s, "orders")
    assert store.hour("orders", T0) == ([], {})
    assert len(store.hour("billing", T0)[0]) == 1
