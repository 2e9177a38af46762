"""The web UI in headless Chromium: sign in, create a subscription through the form (with an
inline validation error first), see its records arrive, pause it. Set FERRY_SCREENSHOTS=1 to
refresh the screenshots in docs/screenshots/."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import httpx
import pytest

from ferry.devstack.embedded import free_port
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.needs import missing
from tests.support.stack import DevStack

pytestmark = [pytest.mark.integration, pytest.mark.browser]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def test_create_watch_and_pause_in_the_browser(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    if not Path(CHROMIUM).exists():
        missing("Chromium", f"{CHROMIUM} does not exist", "apt-get install chromium, as .ci/run does")
    from playwright.sync_api import expect, sync_playwright

    shots = DOCS if os.environ.get("FERRY_SCREENSHOTS") else tmp_path
    # The portal samples every second here, so health badges and charts fill in quickly.
    env = {"FERRY_PORTAL_HISTORY_INTERVAL_MS": "1000"}
    with DevStack(tmp_path, workers=2, env=env) as stack, sync_playwright() as pw:
        s = stack.state
        topic = f"ui-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 2)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(s["portal_url"])
        page.fill("#token", "not-the-token")
        page.click("button[type=submit]")
        expect(page.locator("#login-error")).to_have_text("That token was not accepted.")
        page.fill("#token", s["admin_token"])
        page.click("button[type=submit]")
        expect(page.get_by_role("heading", name="Subscriptions")).to_be_visible()

        page.click("text=New subscription")
        page.fill("#f-name", "ui-orders")
        page.fill("#f-topics", topic)
        page.fill("#f-endpoint-url", "ftp://example.invalid/hook")
        page.click("button:has-text('Create')")
        expect(page.locator("#f-endpoint-url-error")).to_contain_text("http or https")
        expect(page.locator("#f-endpoint-url")).to_have_attribute("aria-invalid", "true")
        page.screenshot(path=str(shots / "create-form-error.png"), full_page=True)
        page.fill("#f-endpoint-url", endpoint.url)
        page.fill("#f-endpoint-headers", "Authorization: Bearer ui-secret")
        page.click("button:has-text('Create')")
        expect(page.get_by_role("heading", name="ui-orders")).to_be_visible()

        produce(s["kafka_bootstrap"], topic, ((f"k{i}".encode(), b"{}", i % 2) for i in range(40)))
        endpoint.wait_for(
            lambda rs: len({r.ce_id for r in rs}) >= 40, timeout_s=60, what="40 records via the UI's subscription"
        )
        assert all(r.headers.get("authorization") == "Bearer ui-secret" for r in endpoint.snapshot())
        committed = page.locator("#partitions tbody tr td:nth-child(4)")
        expect(committed).to_have_text(["20", "20"], timeout=30_000)
        held = page.locator("#partitions tbody tr td:nth-child(7)")  # the watermark stall, from the worker
        expect(held).to_have_text(["0", "0"], timeout=10_000)

        # Charts from the portal's history: points on a wall-clock time axis.
        delivered = page.locator("#rate-chart polyline[data-series='delivered/s']")
        expect(delivered).to_have_attribute("data-points", re.compile(r"^([2-9]|\d{2,})$"), timeout=30_000)
        ticks = page.locator("#lag-chart text.tick.x")
        expect(ticks).to_have_count(5)
        assert all(re.fullmatch(r"\d{1,2}:\d{2}:\d{2}( [AP]M)?", t) for t in ticks.all_text_contents())
        expect(page.locator("#lag-chart polyline[data-series='total']")).to_have_count(1)
        expect(page.locator("#lag-chart polyline.part")).to_have_count(2)  # one line per partition
        page.screenshot(path=str(shots / "subscription.png"), full_page=True)

        # Where is my record: offset 3 of partition 1 was delivered.
        page.fill("#trace-partition", "1")
        page.fill("#trace-offset", "3")
        page.click("button:has-text('Find record')")
        expect(page.locator("#trace-result .badge")).to_have_text("delivered", timeout=10_000)
        page.fill("#trace-offset", "999")
        page.click("button:has-text('Find record')")
        expect(page.locator("#trace-result .badge")).to_have_text("not_in_log", timeout=10_000)

        expect(page.locator("button:has-text('Resume')")).to_be_disabled()
        page.click("button:has-text('Pause')")
        expect(page.locator("#sub-state .badge")).to_have_text("paused", timeout=10_000)
        expect(page.locator("button:has-text('Pause')")).to_be_disabled()
        expect(page.locator("button:has-text('Resume')")).to_be_enabled()
        expect(page.locator("button:has-text('Redrive dead letters')")).to_be_disabled()  # none yet

        # A subscription whose endpoint refuses every connection turns red in the list.
        closed = f"http://127.0.0.1:{free_port()}/hook"
        broken = {
            "name": "ui-broken",
            "topics": [topic],
            "endpoint": {"url": closed},
            "retry": {"max_attempts": 2, "initial_backoff_ms": 50, "max_backoff_ms": 100},
        }
        api = {"Authorization": f"Bearer {s['admin_token']}"}
        assert httpx.post(s["portal_url"] + "/api/v1/subscriptions", json=broken, headers=api).status_code == 201
        page.goto(s["portal_url"] + "/#/subscriptions")
        expect(page.get_by_role("link", name="ui-orders")).to_be_visible()
        expect(page.locator("tr[data-name='ui-orders']")).to_contain_text("paused")
        expect(page.locator("tr[data-name='ui-orders'] .badge.health")).to_have_text("paused")
        bad = page.locator("tr[data-name='ui-broken'] .badge.health")
        expect(bad).to_have_text("failing", timeout=60_000)
        assert bad.evaluate("e => getComputedStyle(e).color") == "rgb(180, 35, 24)"  # red
        expect(page.locator("tr[data-name='ui-broken'] td:nth-child(8)")).not_to_have_text("0")  # dead letters (1 h)
        page.screenshot(path=str(shots / "subscriptions.png"), full_page=True)
        page.goto(s["portal_url"] + "/#/workers")
        expect(page.locator("table.workers td.mono")).to_have_count(2)  # the two workers
        expect(page.locator("table.workers tbody tr")).not_to_have_count(0)
        page.screenshot(path=str(shots / "workers.png"), full_page=True)
        page.goto(s["portal_url"] + "/#/internal")
        expect(page.get_by_role("heading", name="Delays and transactions")).to_be_visible()
        expect(page.locator("text=No transaction is waiting.")).to_be_visible()
        assert "ui-secret" not in page.content()
        assert not [e for e in errors if "Content Security Policy" in e], errors
        browser.close()
