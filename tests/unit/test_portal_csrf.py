"""Which state-changing requests look cross-site (portal.csrf.refusal)."""

from __future__ import annotations

import pytest

from ferry.portal.csrf import refusal


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        # Safe methods always pass: they change nothing.
        ("GET", {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, False),
        ("HEAD", {"Sec-Fetch-Site": "cross-site"}, False),
        ("OPTIONS", {"Origin": "https://evil.example", "Host": "ferry"}, False),
        # Fetch metadata decides when present.
        ("POST", {"Sec-Fetch-Site": "same-origin"}, False),
        ("DELETE", {"Sec-Fetch-Site": "none"}, False),
        ("POST", {"Sec-Fetch-Site": "cross-site"}, True),
        ("PUT", {"Sec-Fetch-Site": "same-site"}, True),
        ("POST", {"Sec-Fetch-Site": "Cross-Site", "Origin": "http://ferry:8080", "Host": "ferry:8080"}, True),
        # No fetch metadata: Origin must be this portal.
        ("POST", {"Origin": "http://ferry:8080", "Host": "ferry:8080"}, False),
        ("POST", {"Origin": "http://FERRY:8080", "Host": "ferry:8080"}, False),
        ("POST", {"Origin": "https://ferry.example", "Host": "ferry.example"}, False),
        ("POST", {"Origin": "https://ferry.example", "Host": "ferry.example:443"}, False),
        ("POST", {"Origin": "http://ferry.example", "Host": "ferry.example:80"}, False),
        (
            "POST",
            {"Origin": "https://ferry.example", "Host": "10.0.0.5:8080", "X-Forwarded-Host": "ferry.example"},
            False,
        ),
        ("POST", {"Origin": "http://ferry:8081", "Host": "ferry:8080"}, True),  # another port: another origin
        ("POST", {"Origin": "https://evil.example", "Host": "ferry.example"}, True),
        ("POST", {"Origin": "https://ferry.example.evil.example", "Host": "ferry.example"}, True),
        ("POST", {"Origin": "null", "Host": "ferry"}, True),
        ("POST", {"Origin": "file://", "Host": "ferry"}, True),
        ("POST", {"Origin": "http://[::1", "Host": "ferry"}, True),  # unparsable
        ("POST", {"Origin": "https://evil.example", "Host": "ferry", "X-Forwarded-Host": "other, ferry"}, True),
        # Neither header: not a browser (curl, SDKs).
        ("POST", {}, False),
        ("DELETE", {"Host": "ferry"}, False),
    ],
)
def test_refusal(method: str, headers: dict[str, str], refused: bool) -> None:
    assert (refusal(method, headers) is not None) == refused
