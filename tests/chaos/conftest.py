"""Fixtures of the chaos suite: a fresh MariaDB database per stack and the endpoint that records pushes."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.conftest import MARIADB_ADMIN_URL


@contextlib.contextmanager
def fresh_database(admin_url: str = MARIADB_ADMIN_URL) -> Iterator[str]:
    """A database of its own for one stack: clusters sharing a database would share subscriptions."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"ferry_chaos_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    except sa.exc.OperationalError as exc:
        pytest.fail(f"MariaDB is not reachable at {admin_url}: {exc}. Start it (see .ci/run).")
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with contextlib.suppress(Exception), admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE `{name}`"))
        admin.dispose()
