"""A subscription over two Kafka clusters in the web UI: its dead letters are in each record's own
cluster, so the page shows one cluster's at a time; a dead letter of ``dc2`` is traced in ``dc2``
and redriven there; a reset can be limited to one cluster."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from ferry.devstack import embedded
from tests.browser.test_ui import ARGS, CHROMIUM, DOCS
from tests.integration.test_zones import ADMIN, Zones, cluster_of, until_dead_lettered
from tests.support.endpoint import EndpointRecorder, Reply
from tests.support.kafka import create_topic, produce
from tests.support.needs import missing

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_dead_letters_trace_redrive_and_reset_per_cluster_in_the_browser(
    tmp_path: Path,
    zk_connect: str,
    kafka_bootstrap: str,
    own_broker: embedded.ServiceProcess,
    endpoint: EndpointRecorder,
) -> None:
    if not Path(CHROMIUM).exists():
        missing("Chromium", f"{CHROMIUM} does not exist", "apt-get install chromium, as .ci/run does")
    from playwright.sync_api import expect, sync_playwright

    z = Zones(tmp_path, zk_connect, kafka_bootstrap, f"127.0.0.1:{own_broker.port}", endpoint)
    try:
        topic = f"zu-{secrets.token_hex(3)}"
        for bootstrap in z.bootstrap.values():
            create_topic(bootstrap, topic, 1)
        endpoint.script = lambda r: Reply(400) if r.key == "poison" else Reply(200)
        sub = {"name": "zu", "topics": [topic], "endpoint": {"url": endpoint.url}, "clusters": ["default", "dc2"]}
        z.c.add_subscription(sub)
        z.c.coordinator()
        for name, zone in (("a1", "dc1"), ("b1", "dc2")):
            z.worker(name, zone).wait_ready(60)
        produce(z.bootstrap["default"], topic, [(b"fine", b"d", 0)])
        produce(z.bootstrap["dc2"], topic, [(b"fine", b"d", 0), (b"poison", b"x", 0)])
        with z.portal() as api:
            until_dead_lettered(api, "zu", f"{topic}/0/1", "dc2", timeout_s=60)
            portal_url = str(api.base_url).removesuffix("/api/v1/")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                answers: list[str] = []

                def answer(dialog: Any) -> None:
                    answers.append(dialog.message)
                    dialog.accept("latest" if dialog.type == "prompt" else None)

                page.on("dialog", answer)
                # A link to the subscription asks for a token, then opens that subscription.
                page.goto(f"{portal_url}/#/subscriptions/zu")
                page.fill("#token", ADMIN)
                page.click("button[type=submit]")
                expect(page.get_by_role("heading", name="zu")).to_be_visible()

                # default's dead letters first: none; dc2's: the poison record.
                picker = page.get_by_label("Dead letters of Kafka cluster")
                expect(picker).to_have_value("default")
                expect(page.get_by_text("No dead letters.")).to_be_visible()
                picker.select_option("dc2")
                row = page.locator("tr.clickable", has_text="poison")
                expect(row).to_contain_text(f"{topic}/0/1")

                # Its trace is dc2's record (default has no offset 1 at all).
                row.click()
                trace = page.locator("#trace-result")
                expect(trace.locator("tr", has_text="cluster")).to_contain_text("dc2")
                expect(trace.locator("tr", has_text="state")).to_contain_text("dead_lettered")
                expect(page.get_by_label("Kafka cluster", exact=True)).to_have_value("dc2")  # the form says so too
                if os.environ.get("FERRY_SCREENSHOTS"):
                    page.screenshot(path=str(DOCS / "subscription-clusters.png"), full_page=True)

                # A redrive from the page redrives dc2's dead letter, pushed again as dc2's record.
                with page.expect_request("**/dead-letters/replay") as sent:
                    page.get_by_role("button", name="Redrive dead letters").click()
                assert sent.value.post_data_json == {"cluster": "dc2"}
                expect(page.locator("#toast")).to_contain_text("Redriven: 1")
                assert "of cluster dc2" in answers[-1]
                endpoint.wait_for(
                    lambda rs: sum(r.key == "poison" for r in rs) >= 2, timeout_s=30, what="the redriven record"
                )
                again = [r for r in endpoint.received if r.key == "poison"][1]
                assert (again.ce_id, cluster_of(again)) == (f"{topic}/0/1", "dc2")

                # A reset limited to dc2 sends the cluster; "all clusters" is the picker's default.
                resets = page.get_by_label("Reset offsets of Kafka cluster")
                expect(resets).to_have_value("")
                resets.select_option("dc2")
                with page.expect_request("**/reset") as sent:
                    page.get_by_role("button", name="Reset offsets…").click()
                assert sent.value.post_data_json == {"to": "latest", "cluster": "dc2"}
                expect(page.locator("#toast")).to_contain_text("Offsets reset", timeout=90_000)
                assert "in cluster dc2" in answers[-1]
                browser.close()
    finally:
        z.close()
