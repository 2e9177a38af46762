"""A PySpark Python Data Source that reads a Kafka topic: ``spark.read.format("ferry-kafka")``.

One Spark input partition per Kafka partition. Each reader creates its own confluent-kafka
consumer inside ``read()`` (clients do not pickle), assigns its partition from the beginning
and reads until partition EOF — the end comes from the fetch response, never from ListOffsets,
which some brokers (the embedded one) answer wrongly.

Options: ``bootstrap`` (required), ``topic`` (required), ``kafka.<setting>`` for any librdkafka
setting (SASL/TLS), ``start_ms`` / ``end_ms`` to keep only records with timestamps in
[start_ms, end_ms), ``timeout_s`` (default 120) per partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

SCHEMA = "kafka_partition int, kafka_offset long, kafka_timestamp long, key binary, value binary"


class KafkaPartition(InputPartition):
    def __init__(self, partition: int) -> None:
        super().__init__(partition)
        self.partition = partition


def client_config(options: dict[str, str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {"bootstrap.servers": options["bootstrap"]}
    for k, v in options.items():
        if k.startswith("kafka."):
            cfg[k.removeprefix("kafka.")] = v
    return cfg


def _executor_logging() -> None:
    """A Spark executor's Python worker is a process of its own: unless something set its logging
    up, Ferry's events (librdkafka's lines among them) would lose their fields."""
    import logging
    import os

    from ferry import log

    if not logging.getLogger().handlers:
        log.setup(os.environ.get("FERRY_LOG_LEVEL", "INFO"), os.environ.get("FERRY_LOG_FORMAT", "json"))


class KafkaReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        if "bootstrap" not in options or "topic" not in options:
            raise ValueError("the ferry-kafka source needs the options 'bootstrap' and 'topic'")
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        from ferry import kafka

        admin = kafka.admin(client_config(self.options), "replay")
        try:
            meta = admin.list_topics(self.options["topic"], timeout=30)
        finally:
            admin.poll(0)  # hand over the call's log lines
        tm = meta.topics.get(self.options["topic"])
        if tm is None or tm.error is not None or not tm.partitions:
            return []
        return [KafkaPartition(p) for p in sorted(tm.partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        import pyarrow as pa
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        from ferry import kafka

        _executor_logging()

        p = partition.partition  # type: ignore[attr-defined]
        topic = self.options["topic"]
        start_ms = int(self.options.get("start_ms", "0") or 0)
        end_ms = int(self.options.get("end_ms", "0") or 0) or None
        consumer = kafka.consumer(
            {
                **client_config(self.options),
                "group.id": "ferry.replay",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 10,
            },
            "replay",
        )
        deadline = time.monotonic() + float(self.options.get("timeout_s", "120"))
        cols: tuple[list[Any], ...] = ([], [], [], [], [])

        def batch() -> Any:
            # Arrow batches cross into the JVM without per-row pickling.
            out = pa.RecordBatch.from_arrays(
                [
                    pa.array(cols[0], pa.int32()),
                    pa.array(cols[1], pa.int64()),
                    pa.array(cols[2], pa.int64()),
                    pa.array(cols[3], pa.binary()),
                    pa.array(cols[4], pa.binary()),
                ],
                names=["kafka_partition", "kafka_offset", "kafka_timestamp", "key", "value"],
            )
            for c in cols:
                c.clear()
            return out

        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic}[{p}] did not reach its end in time")
                for m in consumer.consume(5000, 0.05):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if cols[0]:
                                yield batch()
                            return
                        raise RuntimeError(f"reading {topic}[{p}]: {err.str()}")
                    ts = m.timestamp()[1]
                    if ts < start_ms or (end_ms is not None and ts >= end_ms):
                        continue
                    for c, v in zip(cols, (p, m.offset(), ts, m.key(), m.value()), strict=True):
                        c.append(v)
                if len(cols[0]) >= 20_000:
                    yield batch()
        finally:
            consumer.close()


class KafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ferry-kafka"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaReader(dict(self.options))
