"""`ferry migrate` on MariaDB and SQLite: upgrade from empty, idempotent, no drift against the models."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from ferry import db
from ferry.migrations import runner
from ferry.subscription import parse

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "mariadb"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/meta/ferry.db"
    return str(request.getfixturevalue("mariadb_url"))


def test_upgrade_is_idempotent_and_matches_models(db_url: str) -> None:
    runner.upgrade(db_url)
    runner.upgrade(db_url)
    assert runner.current(db_url) == db.SCHEMA_REVISION
    runner.check(db_url)  # alembic check: autogenerate finds no drift
    engine = db.make_engine(db_url)
    try:
        tables = set(sa.inspect(engine).get_table_names())
        expected = {"subscriptions", "api_tokens", "audit_log", "history_samples", "history_points", "alembic_version"}
        assert expected <= tables
    finally:
        engine.dispose()


def test_models_round_trip_every_subscription_field(db_url: str) -> None:
    runner.upgrade(db_url)
    engine = db.make_engine(db_url)
    sub = parse(
        {
            "name": "orders-to-billing",
            "topics": ["orders", "orders.eu"],
            "endpoint": {"url": "http://billing:8000/hook", "timeout_ms": 750, "headers": {"Authorization": "B x"}},
            "ordering": "partition",
            "max_in_flight": 7,
            "retry": {"max_attempts": 3, "initial_backoff_ms": 10, "max_backoff_ms": 90},
            "dead_letter_topic": "billing.dlq",
            "start_from": "latest",
            "state": "paused",
            "batch": {"max_records": 250, "max_bytes": 65536, "linger_ms": 5},
        }
    )
    try:
        with db.session(engine) as s:
            s.execute(sa.delete(db.SubscriptionRow))
            db.insert_subscription(s, sub)
            db.audit(s, "admin", "subscription.create", sub.name, sub.to_doc())
            _, plain = db.create_token(s, "ci", "read", "admin")
        assert db.load_subscriptions(engine) == [sub]
        with db.session(engine) as s:
            token = db.find_token(s, plain)
            assert token is not None and token.scope == "read"
            assert token.token_hash != plain and plain not in token.token_hash
            entry = db.recent_audit(s, 1)[0]
            assert entry.detail["endpoint"]["headers"] == {"Authorization": "***"}
        with db.session(engine) as s:  # batch off again: back to null columns
            row = db.get_row(s, sub.name)
            assert row is not None and row.batch_max_records == 250
            db.update_subscription(s, row, replace(sub, batch=None))
        assert db.load_subscriptions(engine)[0].batch is None
    finally:
        engine.dispose()


def test_ferry_migrate_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    env = {"FERRY_DB_URL": url, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "ferry.cli", "migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert runner.current(url) == db.SCHEMA_REVISION


def test_unreachable_database_is_a_clear_error() -> None:
    env = {"FERRY_DB_URL": "mysql+pymysql://root@127.0.0.1:1/nope", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "ferry.cli", "migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "cannot reach the database" in done.stderr and "FERRY_DB_URL" in done.stderr


def test_a_database_migrated_by_a_newer_ferry_is_a_clear_error(tmp_path: Path) -> None:
    """After a rollback to an older Ferry (helm rollback): `ferry migrate` and the portal say so in
    one line, instead of a traceback, or advice to run `ferry migrate` that cannot help."""
    url = f"sqlite:///{tmp_path}/newer.db"
    runner.upgrade(url)
    newer = f"{int(db.SCHEMA_REVISION) + 1:04d}"
    engine = db.make_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": newer})
    problem = db.schema_problem(engine)
    engine.dispose()
    assert problem is not None and "newer" in problem and "run `ferry migrate`" not in problem
    env = {"FERRY_DB_URL": url, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "ferry.cli", "migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "a newer Ferry migrated it" in done.stderr


@pytest.fixture()
def empty_db_url(db_url: str) -> Iterator[str]:
    """A database with no schema yet (the MariaDB one of the session is already migrated)."""
    if not db_url.startswith("mysql"):
        yield db_url
        return
    admin = sa.create_engine(db_url, isolation_level="AUTOCOMMIT")
    name = f"{db_url.rsplit('/', 1)[1]}_m2"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield f"{db_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE `{name}`"))
        admin.dispose()


def test_0002_keeps_existing_subscriptions_single_record(empty_db_url: str) -> None:
    db_url = empty_db_url
    runner.upgrade(db_url, "0001")
    engine = db.make_engine(db_url)
    try:
        with engine.begin() as c:
            c.execute(
                sa.text(
                    "INSERT INTO subscriptions (name, topics, endpoint_url, endpoint_timeout_ms, endpoint_headers,"
                    " ordering, max_in_flight, retry_max_attempts, retry_initial_backoff_ms, retry_max_backoff_ms,"
                    " dead_letter_topic, start_from, state, version, created_at, updated_at) VALUES ('old', '[\"t\"]',"
                    " 'http://x/', 5000, '{}', 'key', 100, 5, 200, 30000, 'old.dlq', 'earliest', 'active', 1,"
                    " '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                )
            )
        runner.upgrade(db_url)
        assert runner.current(db_url) == db.SCHEMA_REVISION
        (old,) = db.load_subscriptions(engine)
        assert old.name == "old" and old.batch is None
    finally:
        engine.dispose()


def test_0003_keeps_existing_tokens_and_adds_produce_topics(empty_db_url: str) -> None:
    runner.upgrade(empty_db_url, "0002")
    engine = db.make_engine(empty_db_url)
    try:
        with engine.begin() as c:
            c.execute(
                sa.text(
                    "INSERT INTO api_tokens (name, scope, token_hash, created_by, created_at)"
                    " VALUES ('old', 'read', :h, 'admin', '2026-01-01 00:00:00')"
                ),
                {"h": db.hash_token("fy_old")},
            )
        runner.upgrade(empty_db_url)
        assert runner.current(empty_db_url) == db.SCHEMA_REVISION
        with db.session(engine) as s:
            old = db.find_token(s, "fy_old")
            assert old is not None and old.scope == "read" and old.topics is None
            _, plain = db.create_token(s, "orders-writer", "produce", "admin", topics=["orders", "billing.*"])
        with db.session(engine) as s:
            found = db.find_token(s, plain)
            assert found is not None and found.topics == ["orders", "billing.*"]
    finally:
        engine.dispose()
