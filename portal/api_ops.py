"""Operating a subscription over HTTP: status, reset, dead letters and redrive, the record trace
and the workers view. Reset is an operation of :mod:`ferry.portal.ops` (its protocol is told there).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from aiohttp import web

from ferry import db, log
from ferry.digits import ascii_digits
from ferry.errors import ConfigError
from ferry.offsets import OffsetState
from ferry.portal.api_subscriptions import announce
from ferry.portal.cluster import ClusterBusy, redrive_mark
from ferry.portal.http import CLUSTER, ENGINE, OPS, ApiError, actor, read_json
from ferry.portal.ops import parse_target
from ferry.portal.trace_op import trace_record
from ferry.subscription import DEFAULT_CLUSTER, PartitionRef, Subscription

_log = log.get_logger(__name__)
RESET_RELEASE_TIMEOUT_S = 60.0
MAX_DEAD_LETTERS = 1000


def _subscription(request: web.Request) -> Subscription:
    return request.app[OPS].subscription(request.match_info["name"])


async def status(request: web.Request) -> web.Response:
    sub = await asyncio.to_thread(_subscription, request)
    cluster = request.app[CLUSTER]

    unreachable: list[str] = []

    def gather() -> list[dict[str, Any]]:
        refs = request.app[OPS].partitions(sub, unreachable)
        live = cluster.worker_stats()
        states: dict[PartitionRef, OffsetState | None] = {}
        rows: list[dict[str, Any]] = []
        retried_from: list[tuple[dict[str, Any], list[Any]]] = []
        for ref in refs:
            owner = cluster.owner(ref)
            st = live.get(ref)
            view = cluster.kafka_view(ref.cluster)
            if st is not None and st.get("committed") is not None:
                committed, hw = st["committed"], st.get("high_watermark")
            else:
                if ref not in states:
                    states.update(view.offset_states([r for r in refs if r.cluster == ref.cluster]))
                state = states.get(ref)
                committed = state.committed if state is not None else None
                hw = None
            if hw is None:
                try:
                    hw = view.end_offset(ref.topic, ref.partition, committed or 0)
                except ClusterBusy:
                    hw = None
            lag = max(0, hw - (committed or 0)) if hw is not None else None
            rows.append(
                {
                    "topic": ref.topic,
                    "partition": ref.partition,
                    "cluster": ref.cluster,
                    "worker": owner["worker"] if owner else None,
                    "epoch": owner["epoch"] if owner else None,
                    "committed": committed,
                    "high_watermark": hw,
                    "lag": lag,
                    # From the owner's live figures; None when no worker reports the partition.
                    "stalled_s": (st or {}).get("stalled_s"),
                    "in_flight": (st or {}).get("in_flight", 0),
                    "delivered": (st or {}).get("delivered", 0),
                    "retried": (st or {}).get("retried", 0),
                    "dead_lettered": (st or {}).get("dead_lettered", 0),
                    "filtered": (st or {}).get("filtered", 0),
                }
            )
            if sub.retry.mode == "durable":  # records handed to the delay store to wait for a retry
                rows[-1]["deferred"] = (st or {}).get("deferred", 0)
            for entry in (st or {}).get("sources") or ():
                retried_from.append((rows[-1], entry))
        fold_sources(rows, retried_from)
        return rows

    rows = await asyncio.to_thread(gather)
    answer: dict[str, Any] = {"name": sub.name, "state": sub.state, "partitions": rows}
    if sub.concurrency is not None:
        answer["concurrency"] = await asyncio.to_thread(_adaptive, cluster, sub)
    # A topic without rows is missing only if every cluster could be asked about it.
    missing = [] if unreachable else [t for t in sub.topics if not any(r["topic"] == t for r in rows)]
    warnings = [*unreachable]
    warnings += [f"topic {t!r} does not exist (yet): nothing is delivered until it is created" for t in missing]
    if warnings:
        answer["warnings"] = warnings
    return web.json_response(answer)


_SOURCE_COUNTS = ("delivered", "retried", "dead_lettered", "deferred")


def fold_sources(rows: list[dict[str, Any]], retried_from: list[tuple[dict[str, Any], list[Any]]]) -> None:
    """Move what a retry topic's partition counted for records first read elsewhere (its
    ``sources``: ``[topic, partition, cluster, delivered, retried, dead_lettered, deferred]``)
    from its row to the row of the partition each was first read from, where a user looks for
    them. Counts of a partition without a row here (a topic no longer subscribed) stay put."""
    by_place = {(r["topic"], r["partition"], r["cluster"]): r for r in rows}
    for retry_row, entry in retried_from:
        try:
            topic, partition, cluster, *counts = entry
            target = by_place.get((topic, int(partition), cluster))
        except (TypeError, ValueError):
            continue
        if target is None or target is retry_row:
            continue
        for name, n in zip(_SOURCE_COUNTS, counts, strict=False):
            if not isinstance(n, int) or name not in target:
                continue
            target[name] += n
            retry_row[name] = max(0, retry_row[name] - n)


def _adaptive(cluster: Any, sub: Subscription) -> dict[str, Any]:
    """The adaptive limit toward the subscription's endpoint origin, per worker pushing there."""
    origin = sub.endpoint.origin
    per_worker = {
        wid: doc["endpoints"][origin]
        for wid, doc in cluster.worker_docs().items()
        if origin in (doc.get("endpoints") or {})
    }
    c = sub.concurrency
    assert c is not None
    return {"mode": c.mode, "min": c.min, "max": c.max, "origin": origin, "workers": per_worker}


def _known_keys(body: dict[str, Any], known: tuple[str, ...]) -> None:
    """400 naming the first key the route does not take: ignoring it would do something else
    than asked (a ``cluster`` ignored once reset every cluster)."""
    for key in body:
        if key not in known:
            raise ApiError(400, f"unknown field; this route takes: {', '.join(known)}", str(key))


async def reset(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict) or "to" not in body:
        raise ApiError(400, "is required: 'earliest', 'latest' or epoch milliseconds", "to")
    _known_keys(body, ("to", "cluster"))
    target = parse_target(body["to"])
    only: str | None = None
    if "cluster" in body:
        sub = await asyncio.to_thread(_subscription, request)
        only = _kafka_cluster(request, sub, body["cluster"])
    answer = await request.app[OPS].reset(request.match_info["name"], target, actor(request), only)
    return web.json_response(answer)


def _limit(request: web.Request, default: int) -> int:
    raw = request.query.get("limit", str(default))
    if not ascii_digits(raw) or not 1 <= int(raw) <= MAX_DEAD_LETTERS:
        raise ApiError(400, f"must be an integer between 1 and {MAX_DEAD_LETTERS}", "limit")
    return int(raw)


def _dead_letter(m: Any) -> dict[str, Any]:
    headers = {k: (v or b"") for k, v in (m.headers() or [])}

    def text(name: str) -> str | None:
        v = headers.get(name)
        return v.decode("utf-8", "replace") if v is not None else None

    def number(name: str) -> int | None:
        v = text(name)
        return int(v) if v is not None and ascii_digits(v) else None

    key = m.key()
    return {
        "key": key.decode("utf-8", "replace") if key is not None else None,
        "value": base64.b64encode(m.value() or b"").decode(),
        "headers": {k: v.decode("utf-8", "replace") for k, v in headers.items() if not k.startswith("ferry-")},
        "error": text("ferry-error"),
        "attempts": number("ferry-attempts"),
        "source_topic": text("ferry-source-topic"),
        "source_partition": number("ferry-source-partition"),
        "source_offset": number("ferry-source-offset"),
        "timestamp": m.timestamp()[1],
    }


def _reads_only(sub: Subscription) -> str:
    return ", ".join(sub.clusters)


def _kafka_cluster(request: web.Request, sub: Subscription, chosen: Any) -> str:
    """The Kafka cluster a dead-letter or reset request is about (``default`` unless given): one
    the subscription reads, since its dead letters are in each record's own cluster. ``default``
    is always one: the retry topic is there."""
    name = DEFAULT_CLUSTER if chosen is None else chosen
    if not isinstance(name, str):
        raise ApiError(400, f"must be a Kafka cluster name (a string), got {type(name).__name__}", "cluster")
    if name not in sub.clusters and name != DEFAULT_CLUSTER:
        raise ApiError(
            404,
            f"subscription {sub.name!r} does not read Kafka cluster {name!r}; it reads only: {_reads_only(sub)}",
            "cluster",
        )
    return name


async def dead_letters(request: web.Request) -> web.Response:
    limit = _limit(request, 100)
    sub = await asyncio.to_thread(_subscription, request)
    cluster = request.app[CLUSTER]
    kc = _kafka_cluster(request, sub, request.query.get("cluster"))

    def read() -> list[dict[str, Any]]:
        records = cluster.kafka_view(kc).last_records(sub.dead_letter_topic, limit)
        done = cluster.redriven(sub) if records else set()
        return [{**_dead_letter(m), "cluster": kc, "redriven": redrive_mark(m, kc) in done} for m in records]

    return web.json_response({"dead_letters": await asyncio.to_thread(read)})


async def replay(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):  # not taken as "no options": a bad request must change nothing
        raise ApiError(400, 'must be a JSON object, e.g. {"limit": 100}, or empty', "body")
    _known_keys(body, ("limit", "cluster"))
    limit = body.get("limit", MAX_DEAD_LETTERS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_DEAD_LETTERS:
        raise ApiError(400, f"must be an integer between 1 and {MAX_DEAD_LETTERS}", "limit")
    sub = await asyncio.to_thread(_subscription, request)
    cluster = request.app[CLUSTER]
    kc = _kafka_cluster(request, sub, body.get("cluster"))

    def run() -> tuple[int, int]:
        return cluster.redrive(sub, cluster.kafka_view(kc).last_records(sub.dead_letter_topic, limit), kc)

    n, skipped = await asyncio.to_thread(run)

    def audit() -> None:
        with db.session(request.app[ENGINE]) as s:
            db.audit(s, actor(request), "dead_letters.replay", sub.name, {"records": n, "skipped": skipped})

    await asyncio.to_thread(audit)
    await announce(request, "replay", sub.name)
    return web.json_response({"replayed": n, "already_redriven": skipped, "retry_topic": sub.retry_topic})


async def record_trace(request: web.Request) -> web.Response:
    """Where one record of the subscription is (docs/api.md, "Record trace")."""
    sub = await asyncio.to_thread(_subscription, request)
    topic = request.match_info["topic"]
    if topic not in (*sub.topics, sub.retry_topic):
        raise ApiError(404, f"subscription {sub.name!r} does not read topic {topic!r}", "topic")
    numbers = []
    for field in ("partition", "offset"):
        raw = request.match_info[field]
        if not ascii_digits(raw) or len(raw) > 19:
            raise ApiError(400, "must be a non-negative integer", field)
        numbers.append(int(raw))
    partition, offset = numbers
    kafka_cluster = request.query.get("cluster", DEFAULT_CLUSTER)
    if kafka_cluster not in sub.clusters and not (kafka_cluster == DEFAULT_CLUSTER and topic == sub.retry_topic):
        raise ApiError(
            404,
            f"subscription {sub.name!r} does not read Kafka cluster {kafka_cluster!r}; it reads only: "
            f"{_reads_only(sub)}",
            "cluster",
        )
    try:
        view = request.app[CLUSTER].kafka_view(kafka_cluster)
    except ConfigError as exc:
        raise ApiError(404, str(exc), "cluster") from None
    counts = await asyncio.to_thread(view.partition_counts, [topic])
    if topic not in counts:
        raise ApiError(
            404, f"topic {topic!r} does not exist (yet) in Kafka cluster {kafka_cluster!r}: it has no records", "topic"
        )
    if partition >= counts[topic]:
        have = "its only partition is 0" if counts[topic] == 1 else f"its partitions are 0-{counts[topic] - 1}"
        raise ApiError(404, f"topic {topic!r} has no partition {partition}: {have}", "partition")
    try:
        answer = await asyncio.to_thread(trace_record, view, sub, topic, partition, offset, kafka_cluster)
    except ClusterBusy as exc:
        raise ApiError(503, str(exc)) from None
    return web.json_response(answer)


async def workers(request: web.Request) -> web.Response:
    return web.json_response({"workers": await asyncio.to_thread(request.app[CLUSTER].workers)})


def routes(app: web.Application) -> None:
    base = "/api/v1/subscriptions/{name}"
    app.router.add_get(base + "/status", status)
    app.router.add_post(base + "/reset", reset)
    app.router.add_get(base + "/dead-letters", dead_letters)
    app.router.add_post(base + "/dead-letters/replay", replay)
    app.router.add_get("/api/v1/workers", workers)
    app.router.add_get(base + "/records/{topic}/{partition}/{offset}", record_trace)
