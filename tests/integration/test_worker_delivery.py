"""A real worker (static assignment) against the broker and real HTTP endpoints."""

from __future__ import annotations

import secrets
from collections import defaultdict
from pathlib import Path

import pytest

from ferry import kafka
from ferry.subscription import PartitionRef
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, group_offsets, offset_states, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration


def first_deliveries(received: list[Received]) -> list[Received]:
    seen: set[str] = set()
    out = []
    for r in received:
        if r.ce_id not in seen:
            seen.add(r.ce_id)
            out.append(r)
    return out


def assert_key_order(received: list[Received]) -> None:
    by_key: dict[tuple[int, str | None], list[int]] = defaultdict(list)
    for r in first_deliveries(received):
        by_key[(r.partition, r.key)].append(r.offset)
    for key, offsets in by_key.items():
        assert offsets == sorted(offsets), f"key {key} delivered out of order: {offsets[:20]}"


def test_delivers_everything_in_key_order_and_commits(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic, parts, n = f"orders-{secrets.token_hex(3)}", 8, 20_000
    offsets_topic = f"__offsets-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, parts)
    produce(kafka_bootstrap, topic, ((f"k{i % 200}".encode(), f"v{i}".encode(), (i % 200) % parts) for i in range(n)))
    sub = {"name": "s1", "topics": [topic], "endpoint": {"url": endpoint.url}, "max_in_flight": 64}
    w = static_worker(tmp_path, "w1", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        got = endpoint.wait_for(lambda rs: len({r.ce_id for r in rs}) >= n, timeout_s=120, what=f"{n} records")
        assert_key_order(got)
        r0 = got[0]
        assert r0.headers["ce-specversion"] == "1.0"
        assert r0.headers["ce-source"] == "/ferry/default/s1"
        assert r0.headers["ce-type"] == "dev.ferry.kafka.record"
        assert r0.headers["ce-kafkatopic"] == topic
        assert r0.headers["content-type"] == "application/octet-stream"
        assert {r.body for r in got} == {f"v{i}".encode() for i in range(n)}
        ends = {p: n // parts for p in range(parts)}
        until(
            lambda: all(
                (s := offset_states(kafka_bootstrap, offsets_topic).get(_ref(topic, p))) and s.committed == ends[p]
                for p in range(parts)
            ),
            timeout_s=30,
            what="committed reaches the end of every partition in the offsets topic",
        )
        until(
            lambda: group_offsets(kafka_bootstrap, "ferry.s1", topic, parts) == ends,
            timeout_s=30,
            what="Kafka group offsets equal the watermark",
        )
        stats = {s["partition"]: s for s in w.stats()}
        assert all(stats[p]["committed"] == ends[p] and stats[p]["lag"] == 0 for p in range(parts))
        assert "ferry_records_delivered_total" in w.metrics()
    finally:
        w.stop()
    assert w.proc is not None and w.proc.returncode == 0, w.log_tail()


def _ref(topic: str, p: int) -> PartitionRef:
    return PartitionRef("s1", topic, p)


def test_poison_key_dead_letters_while_other_keys_flow(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic = f"poison-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    endpoint.script = lambda r: Reply(500) if r.key == "bad" else Reply(200)
    produce(kafka_bootstrap, topic, [(b"bad", b"poison", 0)] + [(f"k{i}".encode(), b"ok", 0) for i in range(50)])
    sub = {
        "name": "s2",
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "retry": {"max_attempts": 3, "initial_backoff_ms": 50, "max_backoff_ms": 100},
    }
    w = static_worker(tmp_path, "w2", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        got = endpoint.wait_for(
            lambda rs: sum(1 for r in rs if r.key == "bad") >= 3 and sum(1 for r in rs if r.key != "bad") >= 50,
            timeout_s=30,
            what="3 attempts of the poison key and all other keys",
        )
        attempts = [int(r.headers["ce-ferryattempt"]) for r in got if r.key == "bad"]
        assert attempts == [1, 2, 3]
        # Other keys were not held back behind the poison key's retries.
        first_bad_done = max(i for i, r in enumerate(got) if r.key == "bad")
        assert sum(1 for r in got[:first_bad_done] if r.key != "bad") > 0
        dlq = until(lambda: _read_all(kafka_bootstrap, "s2.dlq"), timeout_s=15, what="the dead letter is produced")
        assert len(dlq) == 1
        key, value, headers = dlq[0]
        assert (key, value) == (b"bad", b"poison")
        assert headers["ferry-attempts"] == b"3"
        assert headers["ferry-source-topic"] == topic.encode()
        assert headers["ferry-source-partition"] == b"0"
        assert headers["ferry-source-offset"] == b"0"
        assert b"500" in headers["ferry-error"]
        until(lambda: w.stats()[0]["committed"] == 51, timeout_s=15, what="dead letter counts as acknowledged")
        assert w.stats()[0]["dead_lettered"] == 1
    finally:
        w.stop()


def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    out: list[tuple[bytes | None, bytes | None, dict[str, bytes]]] = []
    kafka.read_to_end(
        {"bootstrap.servers": bootstrap},
        topic,
        lambda m: out.append((m.key(), m.value(), {k: v for k, v in (m.headers() or [])})),
    )
    return out
