"""Filters on a real worker, broker and endpoint: each kind of filter delivers exactly the matching
records of a mixed stream, the rest are acknowledged without a push and counted, committed reaches
the end (also on a partition whose records are all filtered), and batch mode filters too."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from ferry.subscription import PartitionRef
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration
N = 10_000
PARTS = 4
REGIONS = ("eu", "us", "ap", "sa")


def mixed_stream(bootstrap: str, topic: str) -> dict[int, tuple[str, str, int]]:
    """Record i: key ``<region>-<i % 50>``, header region, value i; partition 3 holds only 'sa'."""
    create_topic(bootstrap, topic, PARTS)
    truth: dict[int, tuple[str, str, int]] = {}
    by_header: dict[str, list[tuple[bytes, bytes, int]]] = {}
    for i in range(N):
        region = REGIONS[i % 3] if i % 4 else "sa"
        partition = 3 if region == "sa" else i % 3
        key = f"{region}-{i % 50}"
        truth[i] = (region, key, partition)
        by_header.setdefault(region, []).append((key.encode(), str(i).encode(), partition))
    for region, records in by_header.items():
        produce(bootstrap, topic, records, headers=[("region", region.encode())])
    return truth


@pytest.mark.parametrize(
    ("filter_doc", "wanted", "batch"),
    [
        ({"exact": {"region": "eu"}}, lambda region, key, i: region == "eu", False),
        ({"prefix": {"partitionkey": "us-1"}}, lambda region, key, i: key.startswith("us-1"), False),
        (
            {
                "sql": "region IN ('eu', 'ap') AND INT(kafkaoffset) >= 0"
                " AND LENGTH(partitionkey) < 5 AND kafkapartition <> 3"
            },
            lambda region, key, i: region in ("eu", "ap") and len(key) < 5,
            False,
        ),
        (
            {"not": {"any": [{"exact": {"region": "eu"}}, {"suffix": {"partitionkey": "-7"}}]}},
            lambda r, k, i: r != "eu" and not k.endswith("-7"),
            True,
        ),
    ],
    ids=["exact", "prefix", "sql", "not-any-batch"],
)
def test_a_filter_delivers_exactly_the_matching_records(
    tmp_path: Path,
    kafka_bootstrap: str,
    endpoint: EndpointRecorder,
    filter_doc: dict[str, Any],
    wanted: Any,
    batch: bool,
) -> None:
    topic = f"filtered-{secrets.token_hex(3)}"
    offsets_topic = f"__offsets-{secrets.token_hex(3)}"
    truth = mixed_stream(kafka_bootstrap, topic)
    expected = {str(i) for i, (region, key, _) in truth.items() if wanted(region, key, i)}
    assert 0 < len(expected) < N
    sub: dict[str, Any] = {"name": "f1", "topics": [topic], "endpoint": {"url": endpoint.url}, "filter": filter_doc}
    if batch:
        sub["batch"] = {"max_records": 50}
    w = static_worker(tmp_path, "w1", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        ends = {p: sum(1 for *_, part in truth.values() if part == p) for p in range(PARTS)}
        until(
            lambda: all(
                (s := offset_states(kafka_bootstrap, offsets_topic).get(PartitionRef("f1", topic, p)))
                and s.committed == ends[p]
                for p in range(PARTS)
            ),
            timeout_s=90,
            what="committed reaches the end of every partition, the all-filtered one too",
        )
        if batch:
            import base64
            import json

            events = [e for r in endpoint.received for e in json.loads(r.body)]
            got = {str(e["data"]) if "data" in e else base64.b64decode(e["data_base64"]).decode() for e in events}
        else:
            got = {r.body.decode() for r in endpoint.received}
        assert got == expected
        stats = w.stats()
        assert sum(s["filtered"] for s in stats) == N - len(expected)
        assert "ferry_records_filtered_total" in w.metrics()
    finally:
        w.stop()


def test_a_filter_change_applies_to_records_not_yet_pushed_and_traceparent_reaches_the_endpoint(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    """Through the coordinator: the filter is changed while the subscription runs; records produced
    afterwards are judged by the new filter. A record's W3C trace context reaches the endpoint."""
    from tests.support.cluster import Cluster

    topic = f"refilter-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    c = Cluster(tmp_path, zk_connect, kafka_bootstrap)
    try:
        c.coordinator()
        w1 = c.worker("w1")
        w1.wait_ready(60)
        c.add_subscription(
            {"name": "rf", "topics": [topic], "endpoint": {"url": endpoint.url}, "filter": {"exact": {"region": "eu"}}}
        )
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        produce(kafka_bootstrap, topic, [(b"k", b"eu-1", 0)], headers=[("region", b"eu"), ("traceparent", tp.encode())])
        produce(kafka_bootstrap, topic, [(b"k", b"us-1", 0)], headers=[("region", b"us")])
        first = endpoint.wait_for(lambda rs: any(r.body == b"eu-1" for r in rs), timeout_s=60, what="eu-1")
        assert next(r for r in first if r.body == b"eu-1").headers.get("traceparent") == tp
        c.edit("rf", filter={"exact": {"region": "us"}})
        # Wait until the worker runs the new document (its stats say which filter it applies).
        new = {"exact": {"region": "us"}}
        until(
            lambda: [s["filter"] for s in w1.stats()] == [new], timeout_s=30, what="the worker applies the new filter"
        )
        produce(kafka_bootstrap, topic, [(b"k", b"eu-2", 0)], headers=[("region", b"eu")])
        produce(kafka_bootstrap, topic, [(b"k", b"us-2", 0)], headers=[("region", b"us")])
        endpoint.wait_for(lambda rs: any(r.body == b"us-2" for r in rs), timeout_s=60, what="us-2 under the new filter")
        bodies = {r.body for r in endpoint.snapshot()}
        assert bodies == {b"eu-1", b"us-2"}, bodies
    finally:
        c.close()
