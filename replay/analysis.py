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
- ``final_state``: one row per key: subscription, topic, partition, committed, epoch, worker, ts.
- ``per_minute``: per subscription and minute, offset records written and offsets acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

DECODED = (
    "subscription string, topic string, partition int, kafka_partition int, kafka_offset long, "
    "kafka_timestamp long, ts long, committed long, epoch long, worker string, gaps int, acked_span long, "
    "acked_json string, tombstone boolean, error string"
)
FINAL = "subscription string, topic string, partition int, committed long, epoch long, worker string, ts long"
KEY = ["subscription", "topic", "partition"]


def _decode(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    import json

    from ferry.errors import OffsetRecordError
    from ferry.offsets import decode_key, decode_value

    for r in rows:
        key, value = r["key"], r["value"]
        sub = topic = worker = acked = error = None
        partition = committed = epoch = gaps = span = None
        ts = r["kafka_timestamp"]
        tombstone = False
        try:
            ref = decode_key(bytes(key) if key is not None else b"")
            sub, topic, partition = ref.subscription, ref.topic, ref.partition
            if value is None:
                tombstone = True
            else:
                s = decode_value(bytes(value))
                ts, committed, epoch, worker = s.ts, s.committed, s.epoch, s.worker
                gaps, span, acked = len(s.acked), sum(hi - lo for lo, hi in s.acked), json.dumps(s.acked)
        except OffsetRecordError as exc:
            error = str(exc)
        yield (
            sub,
            topic,
            partition,
            r["kafka_partition"],
            r["kafka_offset"],
            r["kafka_timestamp"],
            ts,
            committed,
            epoch,
            worker,
            gaps,
            span,
            acked,
            tombstone,
            error,
        )


def decode(raw: DataFrame) -> DataFrame:
    """Every offset record decoded by the shared codec (``ferry.offsets``), plain Python per partition."""
    return raw.sparkSession.createDataFrame(raw.rdd.mapPartitions(_decode), DECODED)


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


def _fold(df: pd.DataFrame) -> pd.DataFrame:
    import json

    from ferry.offsets import OffsetState, fold

    df = df.sort_values("kafka_offset")
    states: list[OffsetState | None] = []
    for r in df.itertuples(index=False):
        if r.tombstone:
            states.append(None)
        elif r.error is None or (isinstance(r.error, float) and pd.isna(r.error)):
            acked = tuple(tuple(x) for x in json.loads(r.acked_json))
            states.append(OffsetState(int(r.committed), acked, int(r.epoch), str(r.worker), int(r.ts)))
    final = fold(states)
    if final is None:
        return pd.DataFrame([], columns=[c.split()[0] for c in FINAL.split(", ")])
    first = df.iloc[0]
    return pd.DataFrame(
        [
            {
                "subscription": first.subscription,
                "topic": first.topic,
                "partition": int(first.partition),
                "committed": final.committed,
                "epoch": final.epoch,
                "worker": final.worker,
                "ts": final.ts,
            }
        ]
    )


def final_state(decoded: DataFrame) -> DataFrame:
    keyed = decoded.where(F.col("subscription").isNotNull())
    return keyed.groupBy(*KEY).applyInPandas(_fold, FINAL)


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
