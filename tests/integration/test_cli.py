"""The client commands against a real stack (ferry dev: portal, gateway, worker): login stores the
token privately, apply is idempotent and prunes only what it says, produce goes through the
gateway, trace and status answer, and errors end with meaningful exit codes."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ferry import kafka
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic
from tests.support.stack import DevStack
from tests.support.wait import until

pytestmark = pytest.mark.integration


def test_the_operator_cli(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env.pop("FERRY_URL", None)
    env.pop("FERRY_TOKEN", None)

    def ferry(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ferry.cli", *args], env=env, input=stdin, capture_output=True, text=True, timeout=60
        )

    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        topic = f"cli-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 2)
        assert ferry("subscriptions", "list").returncode == 4  # not logged in: one line, no traceback
        bad = ferry("login", s["portal_url"], "--token", "wrong")
        assert bad.returncode == 4 and bad.stderr.count("\n") == 1
        ok = ferry("login", s["portal_url"], "--token", s["admin_token"], "--gateway-url", s["gateway_url"])
        assert ok.returncode == 0, ok.stderr
        saved = tmp_path / "xdg" / "ferry" / "config.json"
        assert (
            stat.S_IMODE(saved.stat().st_mode) == 0o600 and json.loads(saved.read_text())["token"] == s["admin_token"]
        )

        subs = tmp_path / "subs"
        subs.mkdir()
        (subs / "a.yaml").write_text(
            f"name: cli-a\ntopics: [{topic}]\nendpoint: {{url: {endpoint.url}}}\nconcurrency: {{mode: adaptive}}\n"
        )
        (subs / "b.json").write_text(
            json.dumps({"name": "cli-b", "topics": [topic], "endpoint": {"url": endpoint.url}})
        )
        first = ferry("apply", "-f", str(subs))
        assert first.returncode == 0 and "+ create cli-a" in first.stdout and "2 created" in first.stdout, first.stdout
        again = ferry("apply", "-f", str(subs))
        assert again.returncode == 0 and "no changes" in again.stdout, again.stdout
        (subs / "b.json").unlink()
        dry = ferry("apply", "-f", str(subs), "--prune", "--dry-run")
        assert "- delete cli-b" in dry.stdout and "nothing changed" in dry.stdout
        table = ferry("subscriptions", "list").stdout
        assert "cli-b" in table and table.splitlines()[0].split()[:4] == ["NAME", "STATE", "HEALTH", "LAG"]
        pruned = ferry("apply", "-f", str(subs), "--prune")
        assert pruned.returncode == 0 and "1 deleted" in pruned.stdout
        listed = json.loads(ferry("subscriptions", "list", "-o", "json").stdout)
        assert [d["name"] for d in listed] == ["cli-a"]  # only what it said

        produced = ferry("produce", topic, "--key-sep", ":", stdin="k1:hello\nk2:world\nplain\n")
        assert produced.returncode == 0 and "3 written" in produced.stdout, produced.stderr
        until(lambda: len({r.body for r in endpoint.received}) >= 3, timeout_s=60, what="the produced lines pushed")
        assert {r.body for r in endpoint.received} == {b"hello", b"world", b"plain"}
        # Run twice with one --idempotency-key (a run that failed half way, run again): written once.
        once = ferry("produce", topic, "--idempotency-key", "cli-run-1", stdin="o1\no2\n")
        assert once.returncode == 0 and once.stdout.strip() == f"2 written to {topic}", once.stdout + once.stderr
        again = ferry("produce", topic, "--idempotency-key", "cli-run-1", stdin="o1\no2\n")
        assert again.returncode == 0, again.stderr
        assert "(2 of them by an earlier run with this key: not written again)" in again.stdout
        assert ferry("produce", topic, "--idempotency-key", "two words", stdin="x\n").returncode == 2
        in_topic: list[Any] = []
        kafka.read_to_end({"bootstrap.servers": s["kafka_bootstrap"]}, topic, in_topic.append)
        assert sorted(m.value() for m in in_topic) == [b"hello", b"o1", b"o2", b"plain", b"world"]  # nothing twice
        sent_at = time.time()
        later = ferry("produce", topic, "--delay", "1500ms", "--header", "origin=cli", stdin="later\n")
        assert later.returncode == 0 and "1 scheduled for" in later.stdout, later.stdout + later.stderr
        got = endpoint.wait_for(lambda rs: any(r.body == b"later" for r in rs), timeout_s=60, what="the delayed line")
        (late,) = [r for r in got if r.body == b"later"]
        assert late.at >= sent_at + 1.5 and late.headers.get("origin") == "cli"
        delays = ferry("delays")
        assert delays.returncode == 0 and delays.stdout.split()[:3] == ["SCHEDULED", "NEXT_DUE", "LATE_P99_MS"]
        refused = ferry("produce", topic, "--delay", "100d", stdin="too far\n")
        assert refused.returncode == 1 and "1 refused" in refused.stdout and "line 1: " in refused.stderr
        assert ferry("produce", topic, "--delay", "soon", stdin="x\n").returncode == 2

        assert ferry("subscriptions", "pause", "cli-a").stdout.strip() == "cli-a: paused"
        assert ferry("subscriptions", "resume", "cli-a").stdout.strip() == "cli-a: active"
        status = ferry("subscriptions", "status", "cli-a")
        assert status.returncode == 0 and "COMMITTED" in status.stdout

        # below the partitions, the adaptive limit of each worker pushing to the endpoint
        def with_limit() -> subprocess.CompletedProcess[str] | None:
            st = ferry("subscriptions", "status", "cli-a")
            return st if "\nworker-1 " in st.stdout else None

        status = until(with_limit, timeout_s=30, what="the worker's adaptive limit in the status")
        assert "concurrency: adaptive 1-100 toward http://" in status.stdout, status.stdout
        traced = json.loads(ferry("trace", f"{topic}/0/0", "-s", "cli-a", "-o", "json").stdout)
        assert traced["state"] in ("delivered", "not_in_log")
        assert ferry("subscriptions", "get", "nope").returncode == 3
        assert ferry("dead-letters", "list", "cli-a").returncode == 0
        assert ferry("trace", "no-slashes", "-s", "cli-a").returncode == 2
        (subs / "c.yaml").write_text(f"name: cli-c\ntopics: [missing-{topic}]\nendpoint: {{url: {endpoint.url}}}\n")
        assert ferry("apply", "-f", str(subs / "c.yaml")).returncode == 0
        status = ferry("subscriptions", "status", "cli-c")
        assert status.returncode == 0 and f"warning: topic 'missing-{topic}' does not exist (yet)" in status.stderr

        # a plan is applied whole or not at all: one document the portal refuses changes nothing
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "1-good.yaml").write_text(f"name: cli-d\ntopics: [{topic}]\nendpoint: {{url: {endpoint.url}}}\n")
        (bad / "2-refused.yaml").write_text(
            f"name: cli-e\ntopics: [{topic}]\nendpoint: {{url: {endpoint.url}}}\nclusters: [default, dc9]\n"
        )
        refused_plan = ferry("apply", "-f", str(bad))
        assert refused_plan.returncode == 1, refused_plan.stdout + refused_plan.stderr
        assert "cli-e: clusters[1]: " in refused_plan.stderr and "nothing changed" in refused_plan.stderr
        assert "+ create" not in refused_plan.stdout
        assert ferry("subscriptions", "get", "cli-d").returncode == 3
        (bad / "2-refused.yaml").write_text(f"name: cli-e\ntopics: [{topic}]\nendpoint: {{url: ftp://x}}\n")
        assert ferry("apply", "-f", str(bad)).returncode == 1  # a bad document, caught before the portal
        (bad / "2-refused.yaml").write_text(f"name: cli-d\ntopics: [{topic}]\nendpoint: {{url: {endpoint.url}}}\n")
        assert ferry("apply", "-f", str(bad)).returncode == 1  # a name defined twice
        assert ferry("apply", "-f", str(bad / "missing.yaml")).returncode == 2  # usage

        # a transaction in doubt, resolved by hand
        prepared = httpx.post(
            f"{s['gateway_url']}/api/v1/transactions",
            headers={"Authorization": f"Bearer {s['admin_token']}"},
            json={"records": [{"topic": topic, "value": "in doubt"}], "check_url": endpoint.url},
        )
        assert prepared.status_code == 201, prepared.text
        txn = prepared.json()["id"]
        assert ferry("transactions", "get", txn).stdout.strip() == f"{txn}: prepared, 0 back-check(s) so far"

        def prepared_listed() -> str | None:
            out = ferry("transactions", "list").stdout
            return out if txn in out else None

        listed = until(prepared_listed, timeout_s=30, what="the prepared transaction listed")
        assert listed.splitlines()[0].split() == ["ID", "AGE_S", "CHECKS", "TIMEOUT_MS", "WORKER"], listed
        committed = ferry("transactions", "commit", txn)
        assert committed.returncode == 0 and committed.stdout.strip() == f"{txn}: committed, 1 record(s) written"
        assert ferry("transactions", "commit", txn).returncode == 0  # the same verb again: the same answer
        assert ferry("transactions", "rollback", txn).returncode == 5  # the other verb after a final state: 409
        assert ferry("transactions", "get", "no-such-txn").returncode == 3
