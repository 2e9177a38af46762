"""Coordination under longer faults: the metadata database goes away, and a rolling restart of every worker."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import MARIADB_ADMIN_URL
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic
from tests.support.load import Trickle
from tests.support.wait import until

pytestmark = pytest.mark.integration


@pytest.fixture()
def mysql_user(mariadb_url: str) -> Iterator[tuple[str, sa.Engine]]:
    """A dedicated MariaDB account for the cluster, so the test can cut *its* access like an outage."""
    admin = sa.create_engine(MARIADB_ADMIN_URL, isolation_level="AUTOCOMMIT")
    user, pw = f"ft_{secrets.token_hex(3)}", secrets.token_hex(8)
    db_name = mariadb_url.rsplit("/", 1)[1]
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{pw}'"))
        c.execute(sa.text(f"GRANT ALL ON `{db_name}`.* TO '{user}'@'127.0.0.1'"))
    url = f"mysql+pymysql://{user}:{pw}@127.0.0.1:3306/{db_name}"
    try:
        yield url, admin
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'"))
        admin.dispose()


def cut(admin: sa.Engine, user: str, locked: bool) -> None:
    with admin.connect() as c:
        c.execute(sa.text(f"ALTER USER '{user}'@'127.0.0.1' ACCOUNT {'LOCK' if locked else 'UNLOCK'}"))
        if locked:  # and drop the sessions it already has, as a server going away would
            for (pid,) in c.execute(
                sa.text("SELECT id FROM information_schema.processlist WHERE user = :u"), {"u": user}
            ):
                c.execute(sa.text(f"KILL {int(pid)}"))


def test_database_outage_does_not_stop_delivery(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, endpoint: EndpointRecorder, mysql_user: tuple[str, sa.Engine]
) -> None:
    url, admin = mysql_user
    user = url.split("//", 1)[1].split(":", 1)[0]
    cluster = Cluster(tmp_path, zk_connect, kafka_bootstrap, db_url=url)
    try:
        topic = f"dbout-{secrets.token_hex(3)}"
        create_topic(kafka_bootstrap, topic, 4)
        cluster.add_subscription({"name": "dbout", "topics": [topic], "endpoint": {"url": endpoint.url}})
        coord = cluster.coordinator()
        cluster.worker("w1")
        cluster.worker("w2")
        until(lambda: len(cluster.assignment()) == 4, timeout_s=30, what="assigned")
        load = Trickle(kafka_bootstrap, topic, 4, rate=100, keys=16).start()
        try:
            endpoint.wait_for(lambda rs: len(rs) > 50, timeout_s=30, what="records flowing")
            cut(admin, user, locked=True)
            until(
                lambda: "catalog.database_unavailable" in coord.log_path.read_text(),
                timeout_s=15,
                what="the coordinator reports the outage",
            )
            # A worker joins during the outage: the leader still plans with the cached subscriptions.
            cluster.worker("w3")
            until(
                lambda: set(cluster.assignment().values()) == {"w1", "w2", "w3"},
                timeout_s=30,
                what="rebalanced onto a new worker during the outage",
            )
            n = len(endpoint.snapshot())
            endpoint.wait_for(
                lambda rs: len(rs) > n + 300, timeout_s=30, what="delivery continues without the database"
            )
            cut(admin, user, locked=False)
            until(
                lambda: "catalog.database_recovered" in coord.log_path.read_text(),
                timeout_s=30,
                what="the coordinator recovers",
            )
        finally:
            produced = load.stop()
        endpoint.wait_for(lambda rs: {(r.partition, r.offset) for r in rs} >= produced, timeout_s=60, what="everything")
    finally:
        cluster.close()


def test_rolling_restart_of_every_worker(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    cluster = Cluster(tmp_path, zk_connect, kafka_bootstrap)
    try:
        topic = f"roll-{secrets.token_hex(3)}"
        create_topic(kafka_bootstrap, topic, 12)
        cluster.add_subscription({"name": "roll", "topics": [topic], "endpoint": {"url": endpoint.url}})
        cluster.coordinator()
        names = ["w1", "w2", "w3"]
        procs = {n: cluster.worker(n) for n in names}
        until(lambda: set(cluster.assignment().values()) == set(names), timeout_s=30, what="3 workers assigned")
        load = Trickle(kafka_bootstrap, topic, 12, rate=800, keys=120, max_records=30_000).start()
        try:
            for i, n in enumerate(names):
                endpoint.wait_for(lambda rs, k=i: len(rs) > 3000 * (k + 1), timeout_s=60, what="records flowing")
                procs[n].stop(grace_s=30)
                assert procs[n].proc is not None and procs[n].proc.returncode == 0
                procs[n] = cluster.worker(n + "b")
                live = [m if m != n else n + "b" for m in names]
                names = live
                until(
                    lambda live=live: set(cluster.assignment().values()) == set(live),
                    timeout_s=30,
                    what=f"{n} replaced",
                )
            produced = load.finish(timeout_s=90)
        finally:
            load.stop()
        got = endpoint.wait_for(
            lambda rs: {(r.partition, r.offset) for r in rs} >= produced,
            timeout_s=90,
            what="every record after the rolling restart",
        )
        dups = sum(c - 1 for c in Counter(r.ce_id for r in got).values())
        print(f"rolling restart: {len(produced)} records, {dups} duplicates")
        assert len(produced) == 30_000
        assert dups == 0, "graceful handoffs must not redeliver anything acknowledged"
    finally:
        cluster.close()
