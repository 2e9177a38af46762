"""Secrets never leak: endpoint header values, tokens, Kafka SASL settings and the database
password appear in no log, API response, metrics page or error message of a running stack."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from ferry import zkpaths
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.stack import DevStack

pytestmark = pytest.mark.integration


def test_no_secret_in_logs_responses_or_metrics(
    tmp_path: Path, endpoint: EndpointRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = "admin-" + secrets.token_hex(8)
    sasl = "sasl-" + secrets.token_hex(8)
    header = "hdr-" + secrets.token_hex(8)
    monkeypatch.setenv("FERRY_ADMIN_TOKEN", admin)
    monkeypatch.setenv("FERRY_KAFKA_CONFIG", json.dumps({"sasl.password": sasl}))
    captured: list[str] = []
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        api = httpx.Client(base_url=s["portal_url"], headers={"Authorization": f"Bearer {admin}"}, timeout=30)
        topic = f"sec-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 1)
        doc = {
            "name": "sec",
            "topics": [topic],
            "endpoint": {"url": endpoint.url, "headers": {"Authorization": f"Bearer {header}"}},
        }
        r = api.post("/api/v1/subscriptions", json=doc)
        assert r.status_code == 201
        captured.append(r.text)
        produce(s["kafka_bootstrap"], topic, [(b"k", b"v", 0)] * 5)
        endpoint.wait_for(lambda rs: len(rs) >= 5, timeout_s=60, what="delivery with the secret header")
        assert all(x.headers["authorization"] == f"Bearer {header}" for x in endpoint.snapshot())
        # Bad input whose error could echo a secret.
        bad = {**doc, "name": "sec2", "endpoint": {"url": endpoint.url, "headers": {"X-Key": header + "\n"}}}
        captured.append(api.post("/api/v1/subscriptions", json=bad).text)
        captured.append(api.put("/api/v1/subscriptions/sec", json={**doc, "max_in_flight": 0}).text)
        tok = api.post("/api/v1/tokens", json={"name": "reader", "scope": "read"}).json()["token"]
        for path in [
            "/api/v1/subscriptions",
            "/api/v1/subscriptions/sec",
            "/api/v1/subscriptions/sec/status",
            "/api/v1/subscriptions/sec/dead-letters",
            "/api/v1/workers",
            "/api/v1/tokens",
            "/api/v1/audit",
            "/api/v1/openapi.json",
            "/metrics",
        ]:
            captured.append(api.get(path).text)
        zk = KazooClient(hosts=s["zk_connect"])
        zk.start(15)
        try:
            wid = zk.get_children(zkpaths.workers(s["cluster"]))[0]
            metrics_url = json.loads(zk.get(zkpaths.worker(s["cluster"], wid))[0])["metrics_url"]
        finally:
            zk.stop()
            zk.close()
        for path in ("/metrics", "/stats"):
            with urllib.request.urlopen(metrics_url + path, timeout=5) as resp:
                captured.append(resp.read().decode())
        logs_dir = stack.dir / "logs"
    logs = {p.name: p.read_text(errors="replace") for p in logs_dir.glob("*.log")}
    assert logs, "the stack wrote no logs"
    for name, text in {**{f"response {i}": c for i, c in enumerate(captured)}, **logs}.items():
        for secret in (admin, sasl, header, tok):
            assert secret not in text, f"a secret leaked into {name}"


def test_database_password_and_sql_parameters_never_leak(
    tmp_path: Path, mariadb_url: str, zk_connect: str, kafka_bootstrap: str
) -> None:
    """A portal whose database refuses writes (missing grant) or is unreachable answers with an
    error, but neither the answer nor its log holds the database password, the SASL password,
    an endpoint header value or a token (SQLAlchemy puts SQL parameters into its error text)."""
    import sqlalchemy as sa

    from ferry.devstack import embedded
    from ferry.migrations import runner

    runner.upgrade(mariadb_url)
    db_password = "dbpw-" + secrets.token_hex(8)
    admin = "admin-" + secrets.token_hex(8)
    sasl = "sasl-" + secrets.token_hex(8)
    header = "hdr-" + secrets.token_hex(8)
    guessed = "guess-" + secrets.token_hex(8)
    user = f"ro_{secrets.token_hex(4)}"
    database = mariadb_url.rsplit("/", 1)[1]
    root = sa.create_engine(mariadb_url, isolation_level="AUTOCOMMIT")
    with root.connect() as conn:
        conn.execute(sa.text(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{db_password}'"))
        conn.execute(sa.text(f"GRANT SELECT ON `{database}`.* TO '{user}'@'%'"))
    base = mariadb_url.split("://", 1)[1].split("@", 1)[1].rsplit("/", 1)[0]  # host:port
    read_only_url = f"mysql+pymysql://{user}:{db_password}@{base}/{database}"
    unreachable_url = f"mysql+pymysql://{user}:{db_password}@127.0.0.1:{embedded.free_port()}/{database}"
    captured: list[str] = []
    logs: list[Path] = []
    try:
        portals: list[tuple[embedded.ServiceProcess, int]] = []
        for name, db_url in (("read-only", read_only_url), ("unreachable", unreachable_url)):
            port = embedded.free_port()
            log_path = tmp_path / f"portal-{name}.log"
            env = {
                "FERRY_DB_URL": db_url,
                "FERRY_ZK_CONNECT": zk_connect,
                "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
                "FERRY_KAFKA_CONFIG": json.dumps({"sasl.password": sasl}),
                "FERRY_ADMIN_TOKEN": admin,
                "FERRY_PORTAL_PORT": str(port),
                "FERRY_CLUSTER": f"sec-{secrets.token_hex(3)}",
            }
            proc = embedded.python_module(f"portal-{name}", ["portal"], log_path, env)
            proc.port = port
            logs.append(log_path)
            portals.append((proc.start(), port))  # both start at once: half the wait
        try:
            for proc, port in portals:
                if proc.name == "portal-unreachable":
                    # It refuses to start, with one line naming FERRY_DB_URL (and no password).
                    assert proc.proc is not None and proc.proc.wait(60) == 2
                    continue
                proc.wait_ready(30)
                api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
                doc = {
                    "name": "leak",
                    "topics": ["t"],
                    "endpoint": {"url": "http://127.0.0.1:9/", "headers": {"X-Api-Key": header}},
                }
                r = api.post("/api/v1/subscriptions", json=doc, headers={"Authorization": f"Bearer {admin}"})
                assert r.status_code >= 500, r.text  # the write (or the connection) fails
                captured.append(r.text)
                r = api.get("/api/v1/subscriptions", headers={"Authorization": f"Bearer {guessed}"})
                captured.append(r.text)
                r = api.post("/api/v1/tokens", json={"name": "t"}, headers={"Authorization": f"Bearer {admin}"})
                captured.append(r.text)
        finally:
            for proc, _ in portals:
                proc.stop()
        migrate = subprocess.run(
            [sys.executable, "-m", "ferry.cli", "migrate"],
            env={**os.environ, "FERRY_DB_URL": unreachable_url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert migrate.returncode != 0
        captured += [migrate.stdout, migrate.stderr]
    finally:
        with root.connect() as conn:
            conn.execute(sa.text(f"DROP USER '{user}'@'%'"))
        root.dispose()
    texts = {**{f"response {i}": c for i, c in enumerate(captured)}, **{p.name: p.read_text() for p in logs}}
    assert any("INSERT command denied" in t for t in texts.values()), "the log does not say what failed"
    assert any("Can't connect to MySQL" in t for t in texts.values()), "the log does not say what failed"
    for name, text in texts.items():
        for secret in (db_password, admin, sasl, header, guessed):
            assert secret not in text, f"a secret leaked into {name}:\n{text[:3000]}"


def test_sql_errors_hide_parameter_values(tmp_path: Path) -> None:
    """SQLAlchemy writes a failed statement's parameters into its error text unless the engine
    hides them; Ferry's engines do, so a header value in a failed INSERT cannot reach a log."""
    import sqlalchemy as sa

    from ferry import db

    secret = "hdr-" + secrets.token_hex(8)
    engine = db.make_engine(f"sqlite:///{tmp_path}/x.db")
    try:
        with pytest.raises(sa.exc.OperationalError) as caught, engine.connect() as conn:
            conn.execute(sa.text("INSERT INTO no_such_table VALUES (:v)"), {"v": secret})
    finally:
        engine.dispose()
    assert "no_such_table" in str(caught.value) and secret not in str(caught.value)
