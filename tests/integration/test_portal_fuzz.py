"""Fuzz the portal API from its own OpenAPI document (schemathesis, bounded examples): no 5xx,
and every response conforms to the document."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ferry.devstack import embedded
from ferry.migrations import runner
from ferry.portal.openapi import DOCUMENT
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.integration
TOKEN = "fuzz-" + secrets.token_hex(8)
schema = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture(scope="module")
def portal_url(tmp_path_factory: pytest.TempPathFactory, zk_connect: str, kafka_bootstrap: str) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("fuzz")
    db_url = f"sqlite:///{tmp}/fuzz.db"
    runner.upgrade(db_url)
    port = embedded.free_port()

    class Portal(WorkerProcess):
        def ready(self) -> bool:
            return embedded.port_open(self.port)

    proc = Portal(
        "portal-fuzz",
        [sys.executable, "-m", "ferry.cli", "portal"],
        port,
        Path(tmp) / "portal.log",
        env={
            **os.environ,
            "FERRY_DB_URL": db_url,
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_ADMIN_TOKEN": TOKEN,
            "FERRY_PORTAL_PORT": str(port),
            "FERRY_CLUSTER": "fuzz",
            "FERRY_ENDPOINT_ALLOW": "127.0.0.0/8",
        },
    ).start()
    try:
        proc.wait_ready(30)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()
        log = proc.log_path.read_text(errors="replace")
        assert "api.failed" not in log, "the portal logged an internal error while fuzzed"


@schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms(case, portal_url: str) -> None:  # type: ignore[no-untyped-def]
    # Schema-valid input may still be refused on purpose (an endpoint host that does not resolve,
    # SSRF policy, unknown names), so "positive data accepted" is not required; the rest is.
    case.call_and_validate(
        base_url=portal_url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
