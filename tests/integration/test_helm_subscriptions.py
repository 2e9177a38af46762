"""The Helm chart's ``subscriptions`` value: the hook Job's own command, run against a real portal
(ferry dev), creates what the values list, changes nothing the second time, and with
``subscriptionsApply.prune`` deletes what the list no longer names."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helm.test_chart import REQUIRED, render
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic
from tests.support.stack import DevStack

pytestmark = pytest.mark.integration


def hook(values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The rendered subscriptions file and the Job's container."""
    docs = render(values)
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-subscriptions"))
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-subscriptions"))
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    return cm["data"]["subscriptions.yaml"], job["spec"]["template"]["spec"]["containers"][0]


def apply(tmp: Path, values: dict[str, Any], portal_url: str, token: str) -> subprocess.CompletedProcess[str]:
    text, container = hook(values)
    env_of = {e["name"]: e for e in container["env"]}
    assert env_of["FERRY_URL"]["value"] == "http://ferry-portal.ferry.svc:80"
    assert env_of["FERRY_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "ferry", "key": "admin-token"}
    mounted = tmp / "subscriptions"
    mounted.mkdir(exist_ok=True)
    (mounted / "subscriptions.yaml").write_text(text)
    args = [a.replace("/subscriptions/", f"{mounted}/") for a in container["args"]]
    env = {**os.environ, "FERRY_URL": portal_url, "FERRY_TOKEN": token, "XDG_CONFIG_HOME": str(tmp / "xdg")}
    return subprocess.run(
        [sys.executable, "-m", "ferry.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_hook_job_applies_the_values_subscriptions(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        topic = f"helm-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 1)

        def sub(name: str) -> dict[str, Any]:
            return {"name": name, "topics": [topic], "endpoint": {"url": endpoint.url}, "ordering": "key"}

        both = {**REQUIRED, "subscriptions": [sub("helm-a"), sub("helm-b")], "subscriptionsApply": {"prune": True}}
        api = httpx.Client(base_url=s["portal_url"], headers={"Authorization": f"Bearer {s['admin_token']}"})

        def names() -> set[str]:
            return {x["name"] for x in api.get("/api/v1/subscriptions").json()["subscriptions"]}

        first = apply(tmp_path, both, s["portal_url"], s["admin_token"])
        assert first.returncode == 0, first.stderr
        assert "applied: 2 created, 0 updated, 0 deleted" in first.stdout
        assert {"helm-a", "helm-b"} <= names()

        again = apply(tmp_path, both, s["portal_url"], s["admin_token"])
        assert again.returncode == 0, again.stderr
        assert "no changes" in again.stdout

        one = {**both, "subscriptions": [sub("helm-a")]}
        pruned = apply(tmp_path, one, s["portal_url"], s["admin_token"])
        assert pruned.returncode == 0, pruned.stderr
        assert "helm-b" not in names() and "helm-a" in names()
