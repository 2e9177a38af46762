"""The portal tells what is wrong with its database, at start and in /healthz, and warns when a
subscription names a topic that does not exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ferry import config
from ferry.migrations import runner
from ferry.portal.app import create_app

pytestmark = pytest.mark.integration
ADMIN = "admin-secret-token"


def settings(db_url: str, zk_connect: str, kafka_bootstrap: str, cluster_name: str) -> config.Settings:
    return config.load(
        env={
            "FERRY_DB_URL": db_url,
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_CLUSTER": cluster_name,
            "FERRY_ADMIN_TOKEN": ADMIN,
        }
    )


def test_the_portal_refuses_to_start_on_an_unmigrated_or_unreachable_database(tmp_path: Path) -> None:
    for url, says in (
        (f"sqlite:///{tmp_path}/empty.db", "ferry migrate"),
        ("mysql+pymysql://root@127.0.0.1:1/test", "FERRY_DB_URL"),
    ):
        run = subprocess.run(
            [sys.executable, "-m", "ferry.cli", "portal"],
            env={"FERRY_DB_URL": url, "FERRY_ADMIN_TOKEN": ADMIN, "PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0]},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "FERRY_DB_URL" in lines[0] and says in lines[0], run.stderr


async def test_healthz_reflects_the_database(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, cluster_name: str
) -> None:
    migrated = f"sqlite:///{tmp_path}/ok.db"
    runner.upgrade(migrated)
    for url, status in ((migrated, 200), (f"sqlite:///{tmp_path}/unmigrated.db", 503)):
        client = TestClient(TestServer(create_app(settings(url, zk_connect, kafka_bootstrap, cluster_name))))
        await client.start_server()
        try:
            r = await client.get("/healthz")
            assert r.status == status
            if status == 503:
                assert "ferry migrate" in (await r.json())["reason"]
        finally:
            await client.close()


async def test_a_missing_topic_is_warned_about(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, cluster_name: str
) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    runner.upgrade(url)
    client = TestClient(TestServer(create_app(settings(url, zk_connect, kafka_bootstrap, cluster_name))))
    await client.start_server()
    try:
        doc = {"name": "w", "topics": ["no-such-topic-here"], "endpoint": {"url": "http://127.0.0.1:9/h"}}
        r = await client.post("/api/v1/subscriptions", json=doc, headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status == 201
        assert (await r.json())["warnings"] == [
            "topic 'no-such-topic-here' does not exist (yet): nothing is delivered until it is created"
        ]
        st = await client.get("/api/v1/subscriptions/w/status", headers={"Authorization": f"Bearer {ADMIN}"})
        assert (await st.json())["partitions"] == [] and "no-such-topic-here" in (await st.json())["warnings"][0]
        bad = await client.post(
            "/api/v1/subscriptions",
            json={**doc, "name": "w2", "topics": "orders"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert bad.status == 400 and "must be a list of topic names" in (await bad.json())["error"]
    finally:
        await client.close()
