"""``ferry replay``: rebuild commit timelines from the offsets topic with Spark and write the report.

Runs in Spark local mode by default (``local[*]``, or ``FERRY_SPARK_MASTER`` / the master
``spark-submit`` gives). Writes to ``--out``: Parquet tables ``timeline/``, ``handoffs/``,
``final_state/``, ``per_minute/``, plus ``summary.json`` and ``report.html``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ferry import config, java, log
from ferry.config import Settings
from ferry.errors import ConfigError

_log = log.get_logger(__name__)


def parse_time(value: str | None, flag: str) -> int | None:
    """Epoch milliseconds from ISO 8601 or epoch ms."""
    if value is None or value == "":
        return None
    if value.isdigit():
        return int(value)
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(flag, f"{value!r} is neither ISO 8601 nor epoch milliseconds") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def session(app: str = "ferry-replay") -> Any:
    java.require_system_java("ferry replay (Spark)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    master = config.value("FERRY_SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("SPARK_CONF", "") and not os.environ.get("SPARK_SUBMIT"):
        builder = builder.master("local[*]")
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(config.value("FERRY_SPARK_SHUFFLE_PARTITIONS")))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", config.value("FERRY_SPARK_DRIVER_MEMORY"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(
    spark: Any,
    settings: Settings,
    out: str,
    subscription: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from ferry.replay import analysis, report
    from ferry.replay.source import KafkaSource

    spark.dataSource.register(KafkaSource)
    # Every configured Kafka cluster keeps its own partitions' states in its own offsets topic
    # (docs/zones.md): read them all, each row marked with its cluster.
    decoded = None
    for name in settings.kafka.cluster_names():
        where = settings.kafka.for_cluster(name)
        reader = (
            spark.read.format("ferry-kafka").option("bootstrap", where.bootstrap).option("topic", where.offsets_topic)
        )
        for k, v in where.config.items():
            reader = reader.option(f"kafka.{k}", str(v))
        part = analysis.decode(reader.load()).withColumn("cluster", F.lit(name))
        decoded = part if decoded is None else decoded.unionByName(part)
    assert decoded is not None  # cluster_names() always holds "default"
    decoded = decoded.cache()
    if subscription:
        decoded = decoded.where(F.col("subscription") == subscription)
    final = analysis.final_state(decoded)  # over the whole history: what a worker restores now
    windowed = decoded
    if since_ms is not None:
        windowed = windowed.where(F.col("ts") >= since_ms)
    if until_ms is not None:
        windowed = windowed.where(F.col("ts") < until_ms)
    tl = analysis.timeline(windowed).cache()
    ho = analysis.handoffs(tl)
    pm = analysis.per_minute(tl)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    tl.drop("max_epoch_before", "acked_json").write.mode("overwrite").parquet(str(outdir / "timeline"))
    ho.write.mode("overwrite").parquet(str(outdir / "handoffs"))
    final.write.mode("overwrite").parquet(str(outdir / "final_state"))
    pm.write.mode("overwrite").parquet(str(outdir / "per_minute"))

    invalid = decoded.where(F.col("error").isNotNull()).count()
    per_sub = {
        r["subscription"]: {"records": r["records"], "partitions": r["partitions"]}
        for r in tl.groupBy("subscription")
        .agg(F.count("*").alias("records"), F.countDistinct("cluster", "topic", "partition").alias("partitions"))
        .collect()
    }
    for r in (
        ho.groupBy("subscription").agg(F.count("*").alias("n"), F.sum("uncommitted_acked").alias("saved")).collect()
    ):
        per_sub.setdefault(r["subscription"], {}).update(handoffs=r["n"], redeliveries_avoided=int(r["saved"] or 0))
    stale = tl.where(F.col("stale")).select(*analysis.KEY, "kafka_offset", "ts", "epoch", "max_epoch_before", "worker")
    for r in stale.groupBy("subscription").count().collect():
        per_sub.setdefault(r["subscription"], {})["stale_writes"] = r["count"]
    for r in final.groupBy("subscription").agg(F.sum("committed").alias("c"), F.count("*").alias("k")).collect():
        per_sub.setdefault(r["subscription"], {}).update(final_committed_total=int(r["c"]), final_keys=r["k"])
    for v in per_sub.values():
        for k in ("records", "partitions", "handoffs", "redeliveries_avoided", "stale_writes"):
            v.setdefault(k, 0)
    summary = {
        "offsets_topic": settings.kafka.offsets_topic,
        "clusters": list(settings.kafka.cluster_names()),
        "subscription": subscription,
        "since_ms": since_ms,
        "until_ms": until_ms,
        "records": sum(v["records"] for v in per_sub.values()),
        "invalid_records": invalid,
        "stale_writes": sum(v["stale_writes"] for v in per_sub.values()),
        "handoffs": sum(v["handoffs"] for v in per_sub.values()),
        "subscriptions": per_sub,
        "generated_at": datetime.now(UTC).isoformat(),
    }
    (outdir / "summary.json").write_text(json.dumps(summary, indent=2))
    # The report plots a bounded sample: at most 200k timeline rows reach the driver.
    tl_pd = tl.select(*analysis.KEY, "ts", "committed", "acked_span", "gaps").orderBy("ts").limit(200_000).toPandas()
    html = report.render(
        summary, tl_pd, ho.orderBy("ts").limit(200).toPandas(), stale.limit(200).toPandas(), pm.toPandas()
    )
    (outdir / "report.html").write_text(html)
    if summary["stale_writes"]:
        _log.warning("replay.stale_writes", count=summary["stale_writes"], hint="see report.html: fencing violations")
    _log.info("replay.done", out=str(outdir), records=summary["records"], handoffs=summary["handoffs"])
    return summary


def main(
    settings: Settings, out: str, subscription: str | None = None, since: str | None = None, until: str | None = None
) -> int:
    since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
    spark = session()
    try:
        summary = run(spark, settings, out, subscription, since_ms, until_ms)
    finally:
        spark.stop()
    print(json.dumps({k: summary[k] for k in ("records", "handoffs", "stale_writes", "invalid_records")}))
    return 0
