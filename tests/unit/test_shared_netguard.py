"""SSRF guard: which addresses a push endpoint may target."""

from __future__ import annotations

import ipaddress

import pytest

from ferry.errors import EndpointRefused, ValidationError
from ferry.netguard import EndpointPolicy, http_url


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


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://2852039166/", "metadata"),  # 169.254.169.254 as one decimal number
        ("http://0251.0376.0251.0376/", "metadata"),  # octal
        ("http://0xa9.0xfe.0xa9.0xfe/", "metadata"),  # hex
        ("http://169.254.43518/", "metadata"),  # a.b.c with a 16-bit last part
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[::ffff:a9fe:a9fe]/", "metadata"),
        ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),  # NAT64
        ("http://[2002:a9fe:a9fe::1]/", "metadata"),  # 6to4
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://0/", "unspecified"),
        ("http://0.0.0.0:8080/", "unspecified"),
        ("http://0.1.2.3/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://[fe80::1%25eth0]/", "link-local"),
    ],
)
def test_address_spellings_are_judged_by_what_they_mean(url: str, reason: str) -> None:
    with pytest.raises(EndpointRefused, match=reason):
        EndpointPolicy().check_url(url)


@pytest.mark.parametrize(
    "host", ["metadata.google.internal", "METADATA.GOOGLE.INTERNAL", "metadata.google.internal.", "metadata.goog"]
)
def test_metadata_names_are_refused_whatever_they_resolve_to(host: str) -> None:
    policy = EndpointPolicy(["*"], resolver=lambda h: ips("10.0.0.1"))
    with pytest.raises(EndpointRefused, match="metadata host"):
        policy.check_url(f"http://{host}/computeMetadata/v1/")


def test_metadata_names_are_refused_before_dns_is_asked() -> None:
    def no_dns(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        raise AssertionError("DNS was asked")

    with pytest.raises(EndpointRefused, match="metadata host"):
        EndpointPolicy(resolver=no_dns).check_url("http://metadata.google.internal/")


def test_private_ranges_need_the_allow_list_once_it_is_set() -> None:
    open_policy = EndpointPolicy(resolver=lambda h: ips("10.0.0.7"))
    open_policy.check_url("http://billing/")  # the contract's default: any but link-local/metadata
    with pytest.raises(EndpointRefused, match="FERRY_ENDPOINT_ALLOW"):
        EndpointPolicy(["*.svc.cluster.local"], resolver=lambda h: ips("10.0.0.7")).check_url("http://billing/")


def test_check_url_asks_the_injected_resolver() -> None:
    asked: list[str] = []

    def resolver(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        asked.append(host)
        return ips("127.0.0.1")

    assert EndpointPolicy(resolver=resolver).check_url("http://name.example:81/") == ips("127.0.0.1")
    assert asked == ["name.example"]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (None, "is required: the http(s) URL it is for"),
        ("", "is required"),
        ("ftp://host/x", "must use http or https"),
        ("http:///x", "must name a host"),
        ("http://user:secret@127.0.0.1:28090/check/x", "must not carry credentials; do this instead"),
        ("http://user@host/x", "must not carry credentials"),
        ("http://:secret@host/x", "must not carry credentials"),
        ("http://host:99999/x", "has an invalid port"),
        ("http://host/" + "x" * 2048, "at most 2048 characters"),
    ],
)
def test_a_url_ferry_sends_to_is_refused_with_what_to_change(url: object, says: str) -> None:
    with pytest.raises(ValidationError) as err:
        http_url(url, "the.field", "it is for", "do this instead")
    assert err.value.field == "the.field" and says in err.value.message


@pytest.mark.parametrize("url", ["http://host/x", "https://10.0.0.1:8443/a?b=c", "http://[::1]:80/"])
def test_a_plain_http_url_passes(url: str) -> None:
    assert http_url(url, "f", "p", "h") == url
