"""Static assignment source: ``ferry worker --assignment FILE``.

For running a worker without ZooKeeper (tests, a single-node setup, debugging an endpoint).
The file is JSON::

    {"subscriptions": [<subscription document>, ...],
     "partitions": [{"subscription": "s", "topic": "t", "partition": 0, "cluster"?: "dc2"}, ...],
     "origins": {"http://svc:8080": 2, ...}}

``partitions`` is optional: without it the worker owns every partition of every topic of every
active subscription, in every Kafka cluster the subscription lists. ``origins`` (optional) says
how many workers push to an adaptive endpoint origin, as the coordinator's assignments do. No
fencing: two workers given the same file would both push; use the coordinator for anything with
more than one worker.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from ferry import kafka, log
from ferry.errors import ConfigError, ValidationError
from ferry.subscription import PartitionRef, Subscription, parse
from ferry.worker.engine import Engine

_log = log.get_logger(__name__)


def load(path: str) -> tuple[dict[str, Subscription], list[PartitionRef] | None, dict[str, int]]:
    """The file's subscriptions, partitions (None: every one) and origins' worker counts."""
    try:
        doc: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError("--assignment", f"file {path} does not exist") from None
    except ValueError as exc:
        raise ConfigError("--assignment", f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("subscriptions"), list):
        raise ConfigError("--assignment", f"{path} must be an object with a 'subscriptions' list")
    subs: dict[str, Subscription] = {}
    for i, raw in enumerate(doc["subscriptions"]):
        try:
            sub = parse(raw)
        except ValidationError as exc:
            raise ConfigError("--assignment", f"{path}: subscriptions.{i}.{exc.field}: {exc.message}") from None
        subs[sub.name] = sub
    origins = doc.get("origins") or {}
    if not isinstance(origins, dict) or not all(isinstance(n, int) and n >= 1 for n in origins.values()):
        raise ConfigError("--assignment", f"{path}: origins must map an origin to a worker count (≥ 1)")
    parts = doc.get("partitions")
    if parts is None:
        return subs, None, origins
    refs: list[PartitionRef] = []
    for i, p in enumerate(parts):
        try:
            ref = PartitionRef.from_entry(p)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConfigError("--assignment", f"{path}: partitions.{i} needs subscription, topic, partition") from None
        if ref.subscription not in subs:
            raise ConfigError("--assignment", f"{path}: partitions.{i} names unknown subscription {ref.subscription!r}")
        refs.append(ref)
    return subs, refs, origins


async def run(engine: Engine, path: str, stop: asyncio.Event) -> None:
    subs, refs, origins = load(path)
    engine.share_origins(origins)
    if refs is None:
        refs = []
        for cluster in sorted({c for s in subs.values() for c in s.clusters}):
            kafka_settings = engine.settings.kafka.for_cluster(cluster)
            active = [s for s in subs.values() if s.state == "active" and cluster in s.clusters]
            topics = {t for s in active for t in s.topics}
            counts = await asyncio.to_thread(kafka.partition_counts, kafka_settings.client_config(), topics)
            refs.extend(
                PartitionRef(s.name, t, p, cluster) for s in active for t in s.topics for p in range(counts.get(t, 0))
            )
            missing = sorted(topics - counts.keys())
            if missing:
                _log.warning("assignment.missing_topics", cluster=cluster, topics=missing)
    engine.expect(len(refs))
    await asyncio.gather(*(engine.acquire(ref, subs[ref.subscription], None) for ref in refs))
    _log.info("assignment.loaded", path=path, partitions=len(refs))
    await stop.wait()
