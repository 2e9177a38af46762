"""A real ``ferry gateway`` process for tests, over the session's broker and a migrated database."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from ferry.devstack import embedded
from ferry.devstack.embedded import ServiceProcess

ADMIN = "test-admin-token"


def gateway_process(tmp_path: Path, bootstrap: str, db_url: str, name: str = "gateway", **env: str) -> ServiceProcess:
    port = embedded.free_port()
    proc = embedded.python_module(
        name,
        ["gateway"],
        tmp_path / f"{name}.log",
        env={
            "FERRY_KAFKA_BOOTSTRAP": bootstrap,
            "FERRY_DB_URL": db_url,
            "FERRY_ADMIN_TOKEN": ADMIN,
            "FERRY_GATEWAY_PORT": str(port),
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parents[2])),
            **env,
        },
    )
    proc.port = port
    return proc


def url(proc: ServiceProcess) -> str:
    return f"http://127.0.0.1:{proc.port}"


def client(proc: ServiceProcess, token: str = ADMIN) -> httpx.Client:
    return httpx.Client(base_url=url(proc), headers={"Authorization": f"Bearer {token}"}, timeout=30)
