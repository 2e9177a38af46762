"""Where a partition starts when it has no offset state yet: ``start_from=latest`` skips what was
in the log when the subscription first reached it, and nothing after that, even when the first
owner dies before its first periodic offset flush."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from ferry import kafka
from ferry.worker.start_offsets import StartOffsets
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration


def test_latest_start_is_anchored_before_the_first_push(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic, parts = f"latest-{secrets.token_hex(3)}", 2
    offsets_topic = f"__offsets-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, parts)
    produce(kafka_bootstrap, topic, ((b"old", f"old{i}".encode(), i % parts) for i in range(20)))
    sub = {"name": "lt", "topics": [topic], "endpoint": {"url": endpoint.url}, "start_from": "latest"}
    # No periodic flush during the test: only the anchor can record where the partitions start.
    env = {"FERRY_OFFSET_FLUSH_INTERVAL_MS": "600000"}
    w = static_worker(tmp_path, "wl", kafka_bootstrap, offsets_topic, [sub], env=env).start()
    try:
        w.wait_ready(30)
        until(
            lambda: (
                {ref.partition: s.committed for ref, s in offset_states(kafka_bootstrap, offsets_topic).items() if s}
                == {0: 10, 1: 10}
            ),
            timeout_s=30,
            what="both partitions anchored at their end (10 records each)",
        )
        produce(kafka_bootstrap, topic, ((f"k{i}".encode(), f"new{i}".encode(), i % parts) for i in range(40)))
        endpoint.wait_for(lambda rs: len(rs) >= 1, timeout_s=30, what="a first new record")
        w.kill()  # before any periodic flush: the anchor is all the next owner has
    finally:
        if w.alive():
            w.stop()

    w2 = static_worker(tmp_path, "wl2", kafka_bootstrap, offsets_topic, [sub], env=env).start()
    try:
        got = endpoint.wait_for(
            lambda rs: {r.body for r in rs} >= {f"new{i}".encode() for i in range(40)},
            timeout_s=60,
            what="every record produced after the anchor",
        )
    finally:
        w2.stop()
    assert not [r.body for r in got if r.body.startswith(b"old")], "records before the start were pushed"


def test_start_offsets_against_the_broker(kafka_bootstrap: str) -> None:
    topic = f"starts-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, ((None, b"v", i % 2) for i in range(30)))  # partition 2 stays empty
    starts = StartOffsets({"bootstrap.servers": kafka_bootstrap}, hint_timeout_s=1.0)
    try:
        wants = [((topic, p), mode) for p in range(3) for mode in ("earliest", "latest")]
        assert starts.resolve_blocking(wants) == {
            ((topic, 0), "earliest"): 0,
            ((topic, 0), "latest"): 15,
            ((topic, 1), "earliest"): 0,
            ((topic, 1), "latest"): 15,
            ((topic, 2), "earliest"): 0,
            ((topic, 2), "latest"): 0,
        }
        # A hint past the end (what a broker should never give) falls back to reading from the beginning.
        consumer = kafka.reader({"bootstrap.servers": kafka_bootstrap})
        try:
            assert starts._read_to_ends(consumer, {(topic, 0): 500, (topic, 1): 3}) == {(topic, 0): 15, (topic, 1): 15}
        finally:
            consumer.close()
    finally:
        starts.close()
