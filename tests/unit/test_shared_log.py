"""Structured logs: one JSON line per event, secrets redacted whatever the caller passed."""

from __future__ import annotations

import json
import logging

import pytest

from ferry import log


def test_json_line_with_fields_and_redaction(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "json")
    log.get_logger("ferry.test").info(
        "subscription.created",
        name="s1",
        headers={"Authorization": "Bearer top"},
        admin_token="tok",
        url="mysql+pymysql://ferry:hunter2@db:3306/ferry",
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["event"] == "subscription.created"
    assert doc["name"] == "s1"
    assert doc["level"] == "info"
    text = lines[0]
    for secret in ("Bearer top", 'tok"', "hunter2"):
        assert secret not in text
    assert doc["url"] == "mysql+pymysql://ferry:***@db:3306/ferry"


def test_debug_is_filtered_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "text")
    log.get_logger("ferry.test").debug("noise", n=1)
    log.get_logger("ferry.test").warning("kept", n=2)
    err = capsys.readouterr().err
    assert "noise" not in err
    assert "kept" in err and "n=2" in err


@pytest.mark.parametrize("chatter", ["kazoo.client", "httpx", "httpcore.connection", "aiohttp.access"])
def test_third_party_chatter_is_kept_to_warnings(capsys: pytest.CaptureFixture[str], chatter: str) -> None:
    """httpx logs every request at INFO: `ferry dev`'s demo producer made a line a second."""
    log.setup("INFO", "json")
    logging.getLogger(chatter).info('HTTP Request: POST http://127.0.0.1:8081/ "HTTP/1.1 200 OK"')
    logging.getLogger(chatter).warning("kept")
    lines = [json.loads(ln) for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert [d["event"] for d in lines] == ["kept"]
