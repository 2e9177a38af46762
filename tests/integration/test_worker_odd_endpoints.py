"""Endpoints that misbehave in every odd way never crash a worker nor hold up other keys or
subscriptions, and each record ends in the documented state (docs/SECURITY.md, "Odd endpoints").

One real worker process, one topic, and for every misbehaviour two subscriptions on that topic:
``p-<b>`` whose endpoint misbehaves only for the key ``poison`` (the other keys of the same
subscription must flow), ``a-<b>`` whose endpoint misbehaves for every key; plus ``good`` to a
well-behaved endpoint on the same topic.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from ferry import kafka
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.odd_endpoint import BEHAVIOURS, OddEndpoint
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration

TIMEOUT_MS = 10_000  # generous: a loaded machine must not turn an answer into a timeout
SLOWLORIS_TIMEOUT_MS = 3000  # the slowloris subscription waits this long (its good keys too)
MAX_ATTEMPTS = 2
GOOD_KEYS = [f"k{i}" for i in range(8)]
# What happens to a record whose endpoint misbehaves: acknowledged, or dead-lettered after
# N attempts with a ferry-error containing the text given.
EXPECTED: dict[str, tuple[str, int, str]] = {
    "redirect-301": ("dead_letter", 1, "endpoint answered 301"),
    "redirect-302": ("dead_letter", 1, "endpoint answered 302"),
    "redirect-307": ("dead_letter", 1, "endpoint answered 307"),
    "chunked-garbage": ("ack", 0, ""),  # the status line and headers decide; the body is never used
    "interim": ("ack", 0, ""),
    "endless-body": ("ack", 0, ""),
    "slow-headers": ("dead_letter", MAX_ATTEMPTS, f"no answer within {SLOWLORIS_TIMEOUT_MS} ms"),
    "huge-headers": ("dead_letter", MAX_ATTEMPTS, "exceed 65536 bytes"),
    "close-delimited": ("ack", 0, ""),
    "reset": ("dead_letter", MAX_ATTEMPTS, "connection closed by the endpoint"),
    "early-answer": ("dead_letter", 1, "endpoint answered 413"),
}


def _sub(name: str, topic: str, url: str) -> dict[str, Any]:
    timeout_ms = SLOWLORIS_TIMEOUT_MS if "slow-headers" in url else TIMEOUT_MS
    return {
        "name": name,
        "topics": [topic],
        "endpoint": {"url": url, "timeout_ms": timeout_ms},
        "retry": {"max_attempts": MAX_ATTEMPTS, "initial_backoff_ms": 10, "max_backoff_ms": 20},
    }


def test_odd_endpoints_never_crash_the_worker_nor_block_others(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    assert set(EXPECTED) == set(BEHAVIOURS), "every misbehaviour needs its documented outcome"
    run = secrets.token_hex(3)
    topic = f"oddep-{run}"
    create_topic(kafka_bootstrap, topic, 1)
    # The poison record comes first and is larger than the endpoint's receive buffer, so
    # "early-answer" really answers mid-body.
    records = [(b"poison", secrets.token_bytes(64_000), 0)] + [(k.encode(), b"v", 0) for k in GOOD_KEYS]
    produce(kafka_bootstrap, topic, records)
    n = len(records)
    with OddEndpoint() as odd:
        subs = [_sub(f"good-{run}", topic, endpoint.url)]
        for b in BEHAVIOURS:
            subs.append(_sub(f"p-{b}-{run}", topic, odd.url(b, only="poison")))
            subs.append(_sub(f"a-{b}-{run}", topic, odd.url(b)))
        w = static_worker(tmp_path, "wodd", kafka_bootstrap, f"__offsets-{run}", subs).start()
        try:
            w.wait_ready(30)
            until(
                lambda: _all_committed(w.stats(), len(subs), n),
                timeout_s=60,
                what="every record of every subscription acknowledged or dead-lettered",
            )
            stats = {s["subscription"]: s for s in w.stats()}
            assert w.alive()
        finally:
            w.stop()
        requests = list(odd.requests)
    assert len({r.ce_id for r in endpoint.snapshot()}) == n, "the good subscription lost records"
    assert stats[f"good-{run}"]["delivered"] == n
    for b in BEHAVIOURS:
        action, attempts, error = EXPECTED[b]
        poisoned = stats[f"p-{b}-{run}"]
        all_bad = stats[f"a-{b}-{run}"]
        dead = 1 if action == "dead_letter" else 0
        assert (poisoned["dead_lettered"], poisoned["delivered"]) == (dead, n - dead), b
        assert (all_bad["dead_lettered"], all_bad["delivered"]) == (dead * n, n - dead * n), b
        good_answers = [r.key for r in requests if r.behaviour == b and r.only and not r.odd]
        assert sorted(set(good_answers)) == sorted(GOOD_KEYS), f"{b}: good keys of the poisoned subscription"
        if action == "dead_letter":
            for name, count in ((f"p-{b}-{run}", 1), (f"a-{b}-{run}", n)):
                dlq = _dead_letters(kafka_bootstrap, f"{name}.dlq")
                assert len(dlq) == count, name
                for h in dlq:
                    assert error.encode() in h["ferry-error"], (name, h["ferry-error"])
                    assert h["ferry-attempts"] == str(attempts).encode(), (name, h["ferry-attempts"])
    # The good keys of the slowloris subscription did not wait for the poison key's timeout.
    order = [(r.key, r.attempt) for r in requests if r.behaviour == "slow-headers" and r.only]
    poison_retry = order.index(("poison", 2))
    assert {key for key, _ in order[:poison_retry]} >= set(GOOD_KEYS), "good keys waited for the poison key"


def _all_committed(stats: list[dict[str, Any]], subscriptions: int, n: int) -> bool:
    return len(stats) == subscriptions and all(s["committed"] == n for s in stats)


def _dead_letters(bootstrap: str, topic: str) -> list[dict[str, bytes]]:
    out: list[dict[str, bytes]] = []
    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, lambda m: out.append(dict(m.headers())))
    return out
