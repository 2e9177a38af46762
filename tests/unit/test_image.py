"""The Dockerfile's runtime image: every service listens beyond the container's loopback."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ferry.config import SETTINGS, Settings

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def runtime_stage() -> str:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return text.split("AS runtime", 1)[1].split("\nFROM ", 1)[0]


def test_every_listening_address_is_all_interfaces_in_the_image() -> None:
    """A service on 127.0.0.1 inside a container cannot be reached through a published port."""
    env: dict[str, str] = {}
    for line in runtime_stage().splitlines():
        if line.startswith("ENV "):
            for item in shlex.split(line[4:]):
                key, _, value = item.partition("=")
                env[key] = value
    hosts = [s.env for s in SETTINGS if s.env.endswith("_HOST")]
    assert hosts and {h: env.get(h) for h in hosts} == dict.fromkeys(hosts, "0.0.0.0")


def test_the_default_ports_of_the_services_are_exposed() -> None:
    exposed = {int(p) for line in runtime_stage().splitlines() if line.startswith("EXPOSE ") for p in line.split()[1:]}
    s = Settings()
    assert {s.portal.port, s.gateway.port, s.worker.metrics_port, s.coordinator.metrics_port} <= exposed
    assert re.search(r"ENTRYPOINT \[\"ferry\"\]", runtime_stage())
