"""Several Kafka clusters (docs/zones.md), the pure parts: the settings, a subscription's
``clusters``, where a partition of another cluster lives in ZooKeeper and in the start records,
and how its records say which cluster they come from."""

from __future__ import annotations

import json

import orjson
import pytest

from ferry import config, zkpaths
from ferry.coordinator import starts
from ferry.errors import ConfigError, ValidationError
from ferry.subscription import PartitionRef, parse
from ferry.worker.batch import EventEncoder, encode_batch
from ferry.worker.push import Record, cloudevent_headers

DC2 = {"dc2": {"bootstrap": "kafka.dc2:9092", "zone": "dc2", "config": {"sasl.password": "s3cret"}}}


def test_clusters_settings() -> None:
    s = config.load(env={"FERRY_KAFKA_CLUSTERS": json.dumps(DC2), "FERRY_DEFAULT_KAFKA_ZONE": "dc1"})
    assert s.kafka.cluster_names() == ("default", "dc2")
    assert (s.kafka.zone_of("default"), s.kafka.zone_of("dc2"), s.kafka.zone_of("gone")) == ("dc1", "dc2", "")
    dc2 = s.kafka.for_cluster("dc2")
    assert dc2.client_config() == {"bootstrap.servers": "kafka.dc2:9092", "sasl.password": "s3cret"}
    assert dc2.offsets_topic == s.kafka.offsets_topic and dc2.name == "dc2"
    assert s.kafka.for_cluster("default") is s.kafka
    with pytest.raises(ConfigError, match="no Kafka cluster named 'dc3'; configured: default, dc2"):
        s.kafka.for_cluster("dc3")
    # Where each cluster is stays visible; its librdkafka settings do not.
    shown = config.describe(s)["FERRY_KAFKA_CLUSTERS"]
    assert shown == {"dc2": {"bootstrap": "kafka.dc2:9092", "zone": "dc2", "config": "***"}}
    assert "s3cret" not in json.dumps(config.describe(s))


def test_no_clusters_by_default() -> None:
    s = config.load(env={})
    assert s.kafka.cluster_names() == ("default",) and s.worker.zone == "" and s.kafka.default_zone == ""


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ("[1]", "FERRY_KAFKA_CLUSTERS", "expected a JSON object"),
        ("{", "FERRY_KAFKA_CLUSTERS", "expected a JSON object of cluster name"),
        ('{"default": {"bootstrap": "x"}}', "FERRY_KAFKA_CLUSTERS.default", "give this one another name"),
        ('{"DC2": {"bootstrap": "x"}}', "FERRY_KAFKA_CLUSTERS.DC2", "must match"),
        ('{"dc2": "x:9092"}', "FERRY_KAFKA_CLUSTERS.dc2", "expected an object"),
        ('{"dc2": {}}', "FERRY_KAFKA_CLUSTERS.dc2.bootstrap", "is required"),
        ('{"dc2": {"bootstrap": "x", "config": []}}', "FERRY_KAFKA_CLUSTERS.dc2.config", "librdkafka"),
        ('{"dc2": {"bootstrap": "x", "zone": 2}}', "FERRY_KAFKA_CLUSTERS.dc2.zone", "zone name"),
        ('{"dc2": {"bootstrap": "x", "zones": "a"}}', "FERRY_KAFKA_CLUSTERS.dc2.zones", "unknown field"),
    ],
)
def test_bad_clusters_name_the_field(raw: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        config.load(env={"FERRY_KAFKA_CLUSTERS": raw})
    assert err.value.setting == field


BASE = {"name": "s", "topics": ["t"], "endpoint": {"url": "http://x/"}}


def test_subscription_clusters_default_and_document() -> None:
    plain = parse(BASE)
    assert plain.clusters == ("default",) and "clusters" not in plain.to_doc()
    both = parse({**BASE, "clusters": ["default", "dc2"]}, clusters=("default", "dc2"))
    assert both.clusters == ("default", "dc2") and both.to_doc()["clusters"] == ["default", "dc2"]
    assert parse(both.to_doc()) == both


@pytest.mark.parametrize(
    ("clusters", "field", "message"),
    [
        ([], "clusters", "non-empty list"),
        ("dc2", "clusters", "non-empty list"),
        (["default", "dc3"], "clusters[1]", "no Kafka cluster named 'dc3' is configured"),
        (["default", "default"], "clusters[1]", "twice"),
        (["Dc2"], "clusters[0]", "cluster name"),
        ([2], "clusters[0]", "cluster name"),
    ],
)
def test_subscription_clusters_are_checked(clusters: object, field: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as err:
        parse({**BASE, "clusters": clusters}, clusters=("default", "dc2"))
    assert err.value.field == field


def test_partitions_of_the_default_cluster_keep_their_paths_and_keys() -> None:
    ref = PartitionRef("s", "t", 3)
    assert ref.cluster == "default" and ref.label() == ref.key() == "s/t/3"
    assert zkpaths.owner("c", *ref) == "/ferry/c/partitions/s/t/3/owner"
    other = PartitionRef("s", "t", 3, "dc2")
    # The same offsets key, in dc2's own offsets topic; its own ZooKeeper node.
    assert other.key() == "s/t/3" and other.label() == "s/t/3@dc2"
    assert zkpaths.owner("c", *other) == "/ferry/c/partitions/s/t@dc2/3/owner"
    assert PartitionRef.from_entry({"subscription": "s", "topic": "t", "partition": 3}) == ref
    assert PartitionRef.from_entry({"subscription": "s", "topic": "t", "partition": 3, "cluster": "dc2"}) == other


def test_start_records_tell_clusters_apart() -> None:
    sub = parse({**BASE, "start_from": "latest", "clusters": ["default", "dc2"]})
    known = starts.record({}, [sub], {"t": 2, "t@dc2": 4}, set())
    assert known == {"s": {"t": 2, "t@dc2": 4}}
    assert starts.from_beginning(sub, starts.at("t", "default"), 2, known)
    assert not starts.from_beginning(sub, starts.at("t", "dc2"), 2, known)


def test_records_of_another_cluster_say_which() -> None:
    r = Record("t", 1, 7, b"k", b"{}", [], 1763800000123)
    assert "ce-kafkacluster" not in cloudevent_headers(r, "ferry", "s", 1)
    h = cloudevent_headers(r, "ferry", "s", 1, "dc2")
    assert h["ce-kafkacluster"] == "dc2" and h["ce-id"] == "t/1/7"
    plain = orjson.loads(encode_batch(EventEncoder("ferry", "s"), [r], [1]))[0]
    other = orjson.loads(encode_batch(EventEncoder("ferry", "s", "dc2"), [r], [1]))[0]
    assert "kafkacluster" not in plain and other["kafkacluster"] == "dc2"
    assert {k: v for k, v in other.items() if k != "kafkacluster"} == plain
