"""``start_from: latest`` and partitions the subscription met after it started: a topic created
later, and the subscription's retry topic (created by a dead-letter replay). Their records are
all newer than the subscription, so they are delivered from the partition's beginning; the
records that were in the log when the subscription started are still skipped."""

from __future__ import annotations

import json
import secrets

import pytest

from ferry import zkpaths
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.wait import until

pytestmark = pytest.mark.integration


def recorded(c: Cluster, name: str) -> dict[str, int] | None:
    path = zkpaths.subscription(c.name, name)
    if not c.zk.exists(path):
        return None
    return dict(json.loads(c.zk.get(path)[0])["partitions_at_start"])


def test_latest_delivers_partitions_met_later_from_their_beginning(
    cluster: Cluster, endpoint: EndpointRecorder
) -> None:
    suffix = secrets.token_hex(3)
    existing, later, name = f"exist-{suffix}", f"later-{suffix}", f"lt{suffix}"
    create_topic(cluster.bootstrap, existing, 2)
    produce(cluster.bootstrap, existing, ((b"k", f"old{i}".encode(), i % 2) for i in range(10)))
    cluster.add_subscription(
        {"name": name, "topics": [existing, later], "endpoint": {"url": endpoint.url}, "start_from": "latest"}
    )
    cluster.coordinator()
    cluster.worker("w1")

    # The leader recorded what the subscription met when it started: `later` did not exist yet.
    until(lambda: recorded(cluster, name) == {existing: 2, later: 0}, timeout_s=30, what="the start recorded")
    until(lambda: all(cluster.owners(name, existing, 2).values()), timeout_s=30, what="the existing topic owned")

    create_topic(cluster.bootstrap, later, 2)
    produce(cluster.bootstrap, later, ((f"k{i}".encode(), f"later{i}".encode(), i % 2) for i in range(10)))
    # The retry topic is what a dead-letter replay creates and writes to (portal/cluster.py).
    retry = f"{name}.retry"
    create_topic(cluster.bootstrap, retry, 1)
    produce(cluster.bootstrap, retry, ((b"bad", f"redriven{i}".encode(), 0) for i in range(3)))

    wanted = {f"later{i}".encode() for i in range(10)} | {f"redriven{i}".encode() for i in range(3)}
    got = endpoint.wait_for(
        lambda rs: {r.body for r in rs} >= wanted,
        timeout_s=60,
        what="every record of the topic created later and of the retry topic",
    )
    assert not [r.body for r in got if r.body.startswith(b"old")], "records from before the start were pushed"
    # Written once: the recorded start does not move with the topics.
    assert recorded(cluster, name) == {existing: 2, later: 0}

    # Deleting the subscription drops its record (a new one of that name starts afresh).
    cluster.delete_subscription(name)
    until(lambda: recorded(cluster, name) is None, timeout_s=30, what="the record dropped with the subscription")
