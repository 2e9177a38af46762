"""The portal tells what is wrong with its database, at start and in /healthz, and warns when a
subscription names a topic that does not exist."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from kazoo.client import KazooClient

from ferry import config, zkpaths
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


async def test_portal_replicas_share_one_history_and_a_restart_keeps_it(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, cluster_name: str
) -> None:
    """Two portals over one database: each interval is sampled once, both answer the same points,
    and a third portal started later still has them."""
    url = f"sqlite:///{tmp_path}/shared.db"
    runner.upgrade(url)
    env = settings(url, zk_connect, kafka_bootstrap, cluster_name)
    env = replace(env, portal=replace(env.portal, history_interval_ms=300))
    auth = {"Authorization": f"Bearer {ADMIN}"}
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    stats = zkpaths.worker_stats(cluster_name, "w1")
    a = TestClient(TestServer(create_app(env)))
    b = TestClient(TestServer(create_app(env)))
    await a.start_server()
    await b.start_server()
    try:
        doc = {"name": "shared", "topics": ["t"], "endpoint": {"url": "http://127.0.0.1:9/h"}}
        assert (await a.post("/api/v1/subscriptions", json=doc, headers=auth)).status == 201
        delivered = 0
        zk.create(stats, b"{}", makepath=True)
        deadline = time.monotonic() + 30
        while True:  # a worker delivering 100 records per 0.1 s, reported as a worker does
            delivered += 100
            part = {"subscription": "shared", "topic": "t", "partition": 0, "epoch": 1, "delivered": delivered}
            zk.set(stats, json.dumps({"partitions": [{**part, "lag": 3}]}).encode())
            history = [await (await c.get("/api/v1/subscriptions/shared/history", headers=auth)).json() for c in (a, b)]
            if len(history[0]["points"]) >= 8 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert len(history[0]["points"]) >= 8, history[0]
        first = history[0]["points"][:7]
        assert history[1]["points"][:7] == first  # one history, whichever replica answers
        points = history[0]["points"]
        buckets = [p["t"] // 300 for p in points]
        assert len(set(buckets)) == len(buckets), buckets  # one sample per interval, not one per replica
        gaps = [later["t"] - earlier["t"] for earlier, later in itertools.pairwise(points)]
        counted = sum(p["delivered_per_s"] * gap / 1000 for p, gap in zip(points[1:], gaps, strict=True))
        # The growth since the first sample (which saw at least 100), never counted twice; the
        # rates are rounded to 0.01/s.
        assert 0 < counted <= delivered - 100 + 1, (counted, delivered)
        assert {p["lag"] for p in points} == {3}
    finally:
        await a.close()
        await b.close()
        zk.stop()
        zk.close()
    c = TestClient(TestServer(create_app(env)))
    await c.start_server()
    try:
        again = await (await c.get("/api/v1/subscriptions/shared/history", headers=auth)).json()
        assert again["points"][:7] == first
    finally:
        await c.close()
