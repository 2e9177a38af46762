"""SSRF guard: which addresses a push endpoint may target."""

from __future__ import annotations

import ipaddress

import pytest

from ferry.errors import EndpointRefused
from ferry.netguard import EndpointPolicy


def ips(*addrs: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address(a) for a in addrs]


@pytest.mark.parametrize(
    ("host", "addresses", "reason"),
    [
        ("169.254.169.254", ["169.254.169.254"], "metadata"),
        ("x", ["169.254.1.1"], "link-local"),
        ("x", ["fe80::1"], "link-local"),
        ("x", ["::ffff:169.254.169.254"], "metadata"),
        ("x", ["fd00:ec2::254"], "metadata"),
        ("x", ["100.100.100.200"], "metadata"),
        ("x", ["0.0.0.0"], "unspecified"),
        ("x", ["224.0.0.1"], "multicast"),
        ("metadata.google.internal", ["10.0.0.1"], "metadata"),
        ("x", ["10.0.0.1", "169.254.0.9"], "link-local"),  # one bad address of several is enough
        ("x", [], "did not resolve"),
    ],
)
def test_always_refused(host: str, addresses: list[str], reason: str) -> None:
    with pytest.raises(EndpointRefused, match=reason):
        EndpointPolicy().check_addresses(f"http://{host}/", host, ips(*addresses))


@pytest.mark.parametrize("address", ["10.1.2.3", "127.0.0.1", "8.8.8.8", "::1"])
def test_open_policy_allows_ordinary_addresses(address: str) -> None:
    EndpointPolicy().check_addresses("http://x/", "x", ips(address))


@pytest.mark.parametrize(
    ("allow", "host", "address", "allowed"),
    [
        (["10.0.0.0/8"], "x", "10.9.9.9", True),
        (["10.0.0.0/8"], "x", "192.168.1.1", False),
        (["*.svc.cluster.local"], "billing.ns.svc.cluster.local", "192.168.1.1", True),
        (["*.svc.cluster.local"], "evil.example", "192.168.1.1", False),
        (["billing", "127.0.0.1/32"], "billing", "10.0.0.1", True),
        (["billing", "127.0.0.1/32"], "other", "127.0.0.1", True),
        (["*.svc.cluster.local"], "a.svc.cluster.local", "169.254.169.254", False),  # allow never beats metadata
    ],
)
def test_allow_list(allow: list[str], host: str, address: str, allowed: bool) -> None:
    policy = EndpointPolicy(allow)
    if allowed:
        policy.check_addresses(f"http://{host}/", host, ips(address))
    else:
        with pytest.raises(EndpointRefused):
            policy.check_addresses(f"http://{host}/", host, ips(address))


def test_check_url_resolves_literals_and_names() -> None:
    assert EndpointPolicy().check_url("http://127.0.0.1:8000/x") == ips("127.0.0.1")
    assert ipaddress.ip_address("127.0.0.1") in EndpointPolicy().check_url("http://localhost:1/")
    with pytest.raises(EndpointRefused):
        EndpointPolicy().check_url("http://[fe80::1]/")
    with pytest.raises(EndpointRefused, match="does not resolve"):
        EndpointPolicy().check_url("http://no-such-host.invalid/")
