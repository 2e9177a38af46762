"""The harness itself: each real service starts, answers, and is isolated per test."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.support.endpoint import EndpointRecorder, Reply

pytestmark = pytest.mark.integration


def test_zookeeper_accepts_sessions(zk_connect: str, cluster_name: str) -> None:
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=15)
    try:
        zk.create(f"/ferry/{cluster_name}/probe", b"x", makepath=True)
        assert zk.get(f"/ferry/{cluster_name}/probe")[0] == b"x"
    finally:
        zk.stop()
        zk.close()


def test_broker_round_trip(kafka_bootstrap: str, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(topic_name, 2, 1)]).values():
        fut.result(15)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic_name, key=b"k", value=str(i).encode(), partition=1)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": "probe",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic_name, 1, 0)])
    values = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "broker returned nothing within 10 s"
            if msg.error():
                break
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == [str(i).encode() for i in range(10)]


def test_mariadb_database_is_fresh(mariadb_url: str) -> None:
    engine = sa.create_engine(mariadb_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT DATABASE()")).scalar() == mariadb_url.rsplit("/", 1)[1]
    engine.dispose()


def test_endpoint_recorder_scripts_answers(endpoint: EndpointRecorder) -> None:
    endpoint.script = lambda r: Reply(503, {"Retry-After": "1"}) if r.attempt == 1 else Reply(204)
    with httpx.Client() as client:
        first = client.post(endpoint.url, content=b"a", headers={"ce-ferryattempt": "1"})
        second = client.post(endpoint.url, content=b"b", headers={"ce-ferryattempt": "2"})
    assert (first.status_code, first.headers["retry-after"], second.status_code) == (503, "1", 204)
    assert [r.body for r in endpoint.wait_for(lambda rs: len(rs) == 2)] == [b"a", b"b"]
