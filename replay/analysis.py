"""Commit timelines from the offsets topic, in Spark.

Input: raw records of the offsets topic (``replay.source``). Every record is decoded by the
shared codec (``ferry.offsets``) and each key's final state is decided by the shared fold
(``ferry.offsets.fold``), the very functions a worker uses on restore — so the replay's final
state and a worker's restore cannot disagree.

Tables (one row per offset record unless said):

- ``timeline``: subscription, topic, partition, kafka_partition, kafka_offset, ts, committed,
  epoch, worker, gaps (acked ranges above committed), acked_span (offsets acked above
  committed), stale (written by a fenced-out owner: epoch below one already seen for the key).
- ``handoffs``: one row per epoch change of a key: the new epoch/worker, the previous ones, and
  ``uncommitted_acked`` — offsets acknowledged above the watermark at that moment: what a
  restore from the contiguous prefix alone would have pushed again, and Ferry did not.
- ``final_state``: one row per key: cluster, subscription, topic, partition, committed, epoch, worker, ts.
- ``per_minute``: per subscription and minute, offset records written and offsets acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

DECODED = (
    "subscription string, topic string, partition int, kafka_partition int, kafka_offset long, "
    "kafka_timestamp long, ts long, committed long, epoch long, worker string, gaps int, acked_span long, "
    "acked_json string, tombstone boolean, error string"
)
FINAL = (
    "cluster string, subscription string, topic string, partition int, committed long, epoch long, worker string,"
    " ts long"
)
KEY = ["cluster", "subscription", "topic", "partition"]
"""A partition's identity: its Kafka cluster too (each cluster has its own offsets topic)."""


_DECODED_NAMES = [c.split()[0] for c in DECODED.split(", ")]


def _decode(batches: Iterable[Any]) -> Iterator[Any]:
    import json

    import pyarrow as pa

    from ferry.errors import OffsetRecordError
    from ferry.offsets import decode_key, decode_value

    schema = _arrow_schema()
    for b in batches:
        d = b.to_pydict()
        out: dict[str, list[Any]] = {n: [] for n in _DECODED_NAMES}
        for kp, ko, kts, key, value in zip(
            d["kafka_partition"], d["kafka_offset"], d["kafka_timestamp"], d["key"], d["value"], strict=True
        ):
            sub = topic = worker = acked = error = None
            partition = committed = epoch = gaps = span = None
            ts = kts
            tombstone = False
            try:
                ref = decode_key(key if key is not None else b"")
                sub, topic, partition = ref.subscription, ref.topic, ref.partition
                if value is None:
                    tombstone = True
                else:
                    s = decode_value(value)
                    ts, committed, epoch, worker = s.ts, s.committed, s.epoch, s.worker
                    gaps, span, acked = len(s.acked), sum(hi - lo for lo, hi in s.acked), json.dumps(s.acked)
            except OffsetRecordError as exc:
                error = str(exc)
            for name, v in zip(
                _DECODED_NAMES,
                (sub, topic, partition, kp, ko, kts, ts, committed, epoch, worker, gaps, span, acked, tombstone, error),
                strict=True,
            ):
                out[name].append(v)
        yield pa.RecordBatch.from_pydict(out, schema=schema)


def _arrow_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([(c.split()[0], types[c.split()[1]]) for c in DECODED.split(", ")])


def decode(raw: DataFrame) -> DataFrame:
    """Every offset record decoded by the shared codec (``ferry.offsets``), Arrow batches in and out."""
    return raw.mapInArrow(_decode, DECODED)


def timeline(decoded: DataFrame) -> DataFrame:
    ok = decoded.where(F.col("error").isNull() & ~F.col("tombstone"))
    before = Window.partitionBy(*KEY).orderBy("kafka_offset").rowsBetween(Window.unboundedPreceding, -1)
    return ok.withColumn("max_epoch_before", F.max("epoch").over(before)).withColumn(
        "stale", F.coalesce(F.col("epoch") < F.col("max_epoch_before"), F.lit(False))
    )


def handoffs(tl: DataFrame) -> DataFrame:
    live = tl.where(~F.col("stale"))
    w = Window.partitionBy(*KEY).orderBy("kafka_offset")
    prev = live.select(
        *KEY,
        "kafka_offset",
        "ts",
        "epoch",
        "worker",
        "committed",
        F.lag("epoch").over(w).alias("previous_epoch"),
        F.lag("worker").over(w).alias("previous_worker"),
        F.lag("committed").over(w).alias("previous_committed"),
        F.lag("acked_span").over(w).alias("uncommitted_acked"),
        F.lag("gaps").over(w).alias("previous_gaps"),
    )
    return prev.where(F.col("previous_epoch").isNotNull() & (F.col("epoch") > F.col("previous_epoch")))


def _fold_partition(batches: Iterable[Any]) -> Iterator[Any]:
    """The shared fold over each key's records, within one Kafka partition of the offsets topic.

    A key's records all live in one partition (keyed writes), read here in log order, so the
    fold needs no shuffle."""
    import json

    import pyarrow as pa

    from ferry.offsets import OffsetState, fold

    logs: dict[tuple[str, str, str, int], list[OffsetState | None]] = {}
    for b in batches:
        d = b.to_pydict()
        for i in range(b.num_rows):
            if d["subscription"][i] is None:
                continue
            k = (d["cluster"][i], d["subscription"][i], d["topic"][i], d["partition"][i])
            if d["tombstone"][i]:
                logs.setdefault(k, []).append(None)
            elif d["error"][i] is None:
                acked = tuple(tuple(x) for x in json.loads(d["acked_json"][i]))
                logs.setdefault(k, []).append(
                    OffsetState(d["committed"][i], acked, d["epoch"][i], d["worker"][i], d["ts"][i])
                )
    out: dict[str, list[Any]] = {
        n: [] for n in ("cluster", "subscription", "topic", "partition", "committed", "epoch", "worker", "ts")
    }
    for (cluster, sub, topic, part), states in logs.items():
        final = fold(states)
        if final is None:
            continue
        row = (cluster, sub, topic, part, final.committed, final.epoch, final.worker, final.ts)
        for n, v in zip(out, row, strict=True):
            out[n].append(v)
    types = [pa.string(), pa.string(), pa.string(), pa.int32(), pa.int64(), pa.int64(), pa.string(), pa.int64()]
    yield pa.RecordBatch.from_pydict(out, schema=pa.schema(list(zip(out, types, strict=True))))


def final_state(decoded: DataFrame) -> DataFrame:
    per_partition = decoded.mapInArrow(_fold_partition, FINAL)
    # A key written to two partitions (never by Ferry) resolves like the fold would: highest epoch, then latest.
    w = Window.partitionBy(*KEY).orderBy(F.col("epoch").desc(), F.col("ts").desc())
    return per_partition.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


def per_minute(tl: DataFrame) -> DataFrame:
    live = tl.where(~F.col("stale")).withColumn("progress", F.col("committed") + F.col("acked_span"))
    minute = live.withColumn("minute", (F.col("ts") / 60000).cast("long") * 60000)
    per_key = minute.groupBy(*KEY, "minute").agg(F.count("*").alias("writes"), F.max("progress").alias("progress"))
    w = Window.partitionBy(*KEY).orderBy("minute")
    deltas = per_key.withColumn(
        "acked", F.greatest(F.lit(0), F.col("progress") - F.coalesce(F.lag("progress").over(w), F.col("progress")))
    )
    return deltas.groupBy("subscription", "minute").agg(
        F.sum("writes").alias("offset_writes"), F.sum("acked").alias("offsets_acknowledged")
    )
