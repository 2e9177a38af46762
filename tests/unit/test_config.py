"""`ferry config` shows what the settings point at without their secrets."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mysql+pymysql://ferry:s3cret@db:3306/ferry", "mysql+pymysql://ferry:***@db:3306/ferry"),
        ("mysql+pymysql://ferry@db/ferry", "mysql+pymysql://ferry@db/ferry"),
        ("sqlite:///ferry.db", "sqlite:///ferry.db"),
        ("mysql+pymysql://u:p@ss:w@rd@db/x", "mysql+pymysql://u:***@db/x"),
    ],
)
def test_only_the_database_password_is_masked(url: str, shown: str) -> None:
    from ferry.config import describe, load

    assert describe(load(env={"FERRY_DB_URL": url}))["FERRY_DB_URL"] == shown
