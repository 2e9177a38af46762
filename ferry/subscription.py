"""The subscription document (docs/contract.md §3): parsing, validation, defaults, masking.

One parser serves the portal (request validation), the coordinator (what it publishes to
ZooKeeper) and the worker (what it pushes by), so the three can never disagree on a field.
``parse`` raises :class:`ferry.errors.ValidationError` whose ``field`` is the dotted path of the
first bad field, e.g. ``endpoint.url``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

from ferry import netguard
from ferry.config import CLUSTER_NAME_RE as CLUSTER_RE
from ferry.config import DEFAULT_KAFKA_CLUSTER
from ferry.errors import ValidationError

DEFAULT_CLUSTER = DEFAULT_KAFKA_CLUSTER
"""The Kafka cluster of ``FERRY_KAFKA_BOOTSTRAP`` (``default``)."""
SOURCE_CLUSTER_HEADER = "ferry-source-cluster"
"""On a dead letter or a record of a retry topic (which lives in ``default``): the Kafka cluster
the record was first read in; absent for ``default`` (docs/zones.md). Written by the worker and
the portal's redrive, read by the worker and the record trace."""

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
# Kafka's own rule for topic names.
TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-zA-Z]+")
ORDERINGS = ("key", "partition", "none")
RETRY_MODES = ("memory", "durable")
STATES = ("active", "paused")
STARTS = ("earliest", "latest")
MASK = "***"
# Headers Ferry sets itself; an endpoint header may not override them.
RESERVED_HEADERS = frozenset({"content-type", "content-length", "host", "transfer-encoding", "connection"})

Ordering = Literal["key", "partition", "none"]


class PartitionRef(NamedTuple):
    """One unit of assignment: a partition of a topic in one Kafka cluster, as consumed by one
    subscription."""

    subscription: str
    topic: str
    partition: int
    cluster: str = DEFAULT_CLUSTER

    def key(self) -> str:
        """The offsets-topic key (docs/contract.md §5). The same in every cluster: each cluster's
        partitions keep their state in that cluster's own offsets topic."""
        return f"{self.subscription}/{self.topic}/{self.partition}"

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> PartitionRef:
        """From an assignment entry (``{"subscription", "topic", "partition", "cluster"?}``)."""
        return cls(
            str(entry["subscription"]),
            str(entry["topic"]),
            int(entry["partition"]),
            entry.get("cluster", DEFAULT_CLUSTER),
        )

    def label(self) -> str:
        """The key, with ``@cluster`` for a cluster other than ``default`` (logs, messages)."""
        key = self.key()
        return key if self.cluster == DEFAULT_CLUSTER else f"{key}@{self.cluster}"


@dataclass(frozen=True)
class Endpoint:
    url: str
    timeout_ms: int = 5000
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        """Scheme, host and port: what an adaptive concurrency limit belongs to."""
        return origin(self.url)


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the port spelled out."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"


@dataclass(frozen=True)
class RetryPolicySpec:
    max_attempts: int = 5
    initial_backoff_ms: int = 200
    max_backoff_ms: int = 30_000
    mode: str = "memory"
    """``memory``: a record waits for its retry in the partition's window; ``durable``: it leaves
    the window and waits in the delay store (docs/delivery.md#durable-retries)."""


@dataclass(frozen=True)
class BatchSpec:
    """Batch push mode: up to ``max_records`` records or ``max_bytes`` of body per POST."""

    max_records: int = 100
    max_bytes: int = 1_048_576
    linger_ms: int = 0


@dataclass(frozen=True)
class ConcurrencySpec:
    """``adaptive``: the in-flight limit toward the endpoint's origin is learned (docs/delivery.md)."""

    mode: str = "adaptive"
    min: int = 1
    max: int = 100


BATCH_MAX_RECORDS = 10_000
BATCH_MIN_BYTES = 1024
BATCH_MAX_BYTES = 64 * 1024 * 1024
BATCH_MAX_LINGER_MS = 60_000


@dataclass(frozen=True)
class Subscription:
    name: str
    topics: tuple[str, ...]
    endpoint: Endpoint
    ordering: Ordering = "key"
    max_in_flight: int = 100
    retry: RetryPolicySpec = field(default_factory=RetryPolicySpec)
    dead_letter_topic: str = ""
    start_from: str = "earliest"
    state: str = "active"
    batch: BatchSpec | None = None
    """None: one record per POST (binary mode); else batch push mode."""
    filter: Any = field(default=None, compare=True)
    """The filter document (docs/filters.md), validated; None: every record is pushed."""
    delay_ms: int = 0
    """Each record is pushed no earlier than its timestamp + this (delayed consumption, docs/delay.md)."""
    concurrency: ConcurrencySpec | None = None
    """None (or mode fixed): ``max_in_flight`` per partition; adaptive: a learned limit per origin."""
    clusters: tuple[str, ...] = (DEFAULT_CLUSTER,)
    """The Kafka clusters its topics are consumed from, every record of each (docs/zones.md)."""

    @property
    def retry_topic(self) -> str:
        """Where redriven dead letters go; consumed by this subscription only."""
        return f"{self.name}.retry"

    @property
    def group_id(self) -> str:
        """Kafka group under which the watermark is committed for lag tools."""
        return f"ferry.{self.name}"

    def to_doc(self, *, mask_secrets: bool = True) -> dict[str, Any]:
        """The document; ``batch`` appears only when set, so single-record documents stay as they were."""
        headers = {k: (MASK if mask_secrets else v) for k, v in self.endpoint.headers.items()}
        doc: dict[str, Any] = {
            "name": self.name,
            "topics": list(self.topics),
            "endpoint": {"url": self.endpoint.url, "timeout_ms": self.endpoint.timeout_ms, "headers": headers},
            "ordering": self.ordering,
            "max_in_flight": self.max_in_flight,
            "retry": {
                "max_attempts": self.retry.max_attempts,
                "initial_backoff_ms": self.retry.initial_backoff_ms,
                "max_backoff_ms": self.retry.max_backoff_ms,
            },
            "dead_letter_topic": self.dead_letter_topic,
            "start_from": self.start_from,
            "state": self.state,
        }
        if self.retry.mode != "memory":
            doc["retry"]["mode"] = self.retry.mode
        if self.batch is not None:
            b = self.batch
            doc["batch"] = {"max_records": b.max_records, "max_bytes": b.max_bytes, "linger_ms": b.linger_ms}
        if self.filter is not None:
            doc["filter"] = self.filter
        if self.delay_ms:
            doc["delay_ms"] = self.delay_ms
        if self.concurrency is not None:
            c = self.concurrency
            doc["concurrency"] = {"mode": c.mode, "min": c.min, "max": c.max}
        if self.clusters != (DEFAULT_CLUSTER,):
            doc["clusters"] = list(self.clusters)
        return doc

    def with_state(self, state: str) -> Subscription:
        return replace(self, state=state)


_TOP_FIELDS = frozenset(
    {
        "name",
        "topics",
        "endpoint",
        "ordering",
        "max_in_flight",
        "retry",
        "dead_letter_topic",
        "start_from",
        "state",
        "batch",
        "filter",
        "delay_ms",
        "concurrency",
        "clusters",
    }
)


def _obj(doc: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise ValidationError(path or "body", "must be a JSON object")
    return doc


def _no_extra(doc: Mapping[str, Any], allowed: frozenset[str], prefix: str) -> None:
    for key in doc:
        if key not in allowed:
            raise ValidationError(f"{prefix}{key}", f"unknown field; allowed: {', '.join(sorted(allowed))}")


def _int_in(doc: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(path, f"must be an integer between {lo} and {hi}")
    if not lo <= value <= hi:
        raise ValidationError(path, f"must be between {lo} and {hi}, got {value}")
    return value


def _choice(doc: Mapping[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    value = doc.get(key, default)
    if value not in choices:
        raise ValidationError(key, f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _topic(value: Any, path: str) -> str:
    if not isinstance(value, str) or not TOPIC_RE.fullmatch(value) or value in (".", ".."):
        raise ValidationError(path, "must be a Kafka topic name: 1-249 of [a-zA-Z0-9._-], not '.' or '..'")
    return value


def _url(value: Any, stored: bool) -> str:
    return netguard.http_url(
        value, "endpoint.url", "records are pushed to", "use endpoint.headers instead", stored=stored
    )


def _headers(value: Any, previous: Mapping[str, str] | None) -> dict[str, str]:
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise ValidationError("endpoint.headers", "must be an object of header name to value")
    if len(value) > 32:
        raise ValidationError("endpoint.headers", "at most 32 headers")
    out: dict[str, str] = {}
    for name, val in value.items():
        path = f"endpoint.headers.{name}"
        if not HEADER_NAME_RE.fullmatch(name) or name.lower().startswith("ce-"):
            raise ValidationError(path, "must be a valid HTTP header name not starting with 'ce-'")
        if name.lower() in RESERVED_HEADERS:
            raise ValidationError(path, "is set by Ferry and cannot be overridden")
        if not isinstance(val, str) or any(c in val for c in "\r\n\0") or len(val) > 8192:
            raise ValidationError(path, "must be a string of at most 8192 characters without CR, LF or NUL")
        if val == MASK:
            # A masked value sent back unchanged (edit form) keeps the stored secret.
            if previous is None or name not in previous:
                raise ValidationError(path, f"'{MASK}' keeps an existing value, but none is stored")
            val = previous[name]
        out[name] = val
    return out


def _batch(value: Any) -> BatchSpec | None:
    """``batch``: absent or null is single-record mode; an object (even ``{}``) turns batching on."""
    if value is None:
        return None
    b = _obj(value, "batch")
    _no_extra(b, frozenset({"max_records", "max_bytes", "linger_ms"}), "batch.")
    return BatchSpec(
        max_records=_int_in(b, "max_records", "batch.max_records", 100, 1, BATCH_MAX_RECORDS),
        max_bytes=_int_in(b, "max_bytes", "batch.max_bytes", 1_048_576, BATCH_MIN_BYTES, BATCH_MAX_BYTES),
        linger_ms=_int_in(b, "linger_ms", "batch.linger_ms", 0, 0, BATCH_MAX_LINGER_MS),
    )


MAX_CONSUMER_DELAY_MS = 7 * 24 * 3600 * 1000
"""The longest ``delay_ms`` of a subscription: a week (records wait in the partition's window)."""

INTERNAL_PREFIX = "ferry-internal."
"""Names of Ferry's own work (the delay store, transaction back-checks): not for users."""


def _clusters(value: Any, known: Collection[str] | None) -> tuple[str, ...]:
    """``clusters``: absent is ``["default"]``; each name once, and configured when ``known`` is given."""
    if value is None:
        return (DEFAULT_CLUSTER,)
    if not isinstance(value, list) or not value:
        raise ValidationError("clusters", 'must be a non-empty list of Kafka cluster names, e.g. ["default", "dc2"]')
    if len(value) > 32:
        raise ValidationError("clusters", "at most 32 clusters")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not CLUSTER_RE.fullmatch(name):
            raise ValidationError(f"clusters[{i}]", "must be a Kafka cluster name: [a-z0-9][a-z0-9_-]{0,39}")
        if known is not None and name not in known:
            raise ValidationError(
                f"clusters[{i}]",
                f"no Kafka cluster named {name!r} is configured (configured: {', '.join(known)});"
                " add it to FERRY_KAFKA_CLUSTERS or remove it here",
            )
        if name in value[:i]:
            raise ValidationError(f"clusters[{i}]", f"lists {name!r} twice")
    return tuple(value)


def parse(
    doc: Any,
    *,
    previous: Subscription | None = None,
    internal: bool = False,
    stored: bool = False,
    clusters: Collection[str] | None = None,
) -> Subscription:
    """Validate a subscription document and fill the defaults.

    ``previous`` is the stored version when updating: a header value sent back as ``***``
    keeps the stored secret. ``internal``: Ferry's own work may use the reserved name prefix.
    ``stored``: a document Ferry saved, perhaps under an earlier version's rules: its filter is not
    held to checks added since (:func:`ferry.filters.parse`), so it keeps loading.
    ``clusters``: the configured Kafka clusters; when given, ``clusters`` may only name them.
    """
    doc = dict(_obj(doc, ""))
    doc.pop("warnings", None)  # read-only hints of an earlier answer, sent back with the document
    _no_extra(doc, _TOP_FIELDS, "")
    name = doc.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValidationError("name", "is required and must match [a-z0-9][a-z0-9._-]{0,62}")
    if name.startswith(INTERNAL_PREFIX) and not internal:
        raise ValidationError("name", f"names starting with {INTERNAL_PREFIX!r} are reserved for Ferry's own work")
    topics = doc.get("topics")
    if topics is None:
        raise ValidationError("topics", "is required: a non-empty list of topic names")
    if not isinstance(topics, list):
        raise ValidationError("topics", f'must be a list of topic names, e.g. ["orders"]; got {type(topics).__name__}')
    if not topics:
        raise ValidationError("topics", "must list at least one topic name")
    if len(topics) > 100:
        raise ValidationError("topics", "at most 100 topics")
    parsed_topics = tuple(_topic(t, f"topics.{i}") for i, t in enumerate(topics))
    if len(set(parsed_topics)) != len(parsed_topics):
        raise ValidationError("topics", "lists a topic twice")

    ep = _obj(doc.get("endpoint"), "endpoint")
    _no_extra(ep, frozenset({"url", "timeout_ms", "headers"}), "endpoint.")
    endpoint = Endpoint(
        url=_url(ep.get("url"), stored),
        timeout_ms=_int_in(ep, "timeout_ms", "endpoint.timeout_ms", 5000, 100, 600_000),
        headers=_headers(ep.get("headers"), previous.endpoint.headers if previous else None),
    )
    rt = dict(_obj(doc.get("retry", {}), "retry"))
    mode = rt.pop("mode", "memory")
    if mode not in RETRY_MODES:
        raise ValidationError("retry.mode", f"must be 'memory' or 'durable', got {mode!r}")
    _no_extra(rt, frozenset({"max_attempts", "initial_backoff_ms", "max_backoff_ms"}), "retry.")
    retry = RetryPolicySpec(
        max_attempts=_int_in(rt, "max_attempts", "retry.max_attempts", 5, 1, 1000),
        initial_backoff_ms=_int_in(rt, "initial_backoff_ms", "retry.initial_backoff_ms", 200, 1, 3_600_000),
        max_backoff_ms=_int_in(rt, "max_backoff_ms", "retry.max_backoff_ms", 30_000, 1, 86_400_000),
        mode=mode,
    )
    if retry.max_backoff_ms < retry.initial_backoff_ms:
        raise ValidationError("retry.max_backoff_ms", "must be >= retry.initial_backoff_ms")

    batch = _batch(doc.get("batch"))
    ordering = _choice(doc, "ordering", "key", ORDERINGS)
    if mode == "durable" and ordering != "none":
        raise ValidationError(
            "retry.mode",
            f"durable retries let a record's retry overtake later records: they need ordering 'none', got {ordering!r}",
        )
    if mode == "durable" and batch is not None:
        raise ValidationError(
            "retry.mode", "durable retries are for single-record push; a batch subscription retries in memory"
        )
    max_in_flight = _int_in(doc, "max_in_flight", "max_in_flight", 100, 1, 10_000)
    filter_doc = doc.get("filter")
    if filter_doc is not None:
        from ferry import filters  # its grammar (lark) only for a subscription that has a filter

        filters.parse(filter_doc, stored=stored)  # raises ValidationError with the filter's dotted field
    dlq = doc.get("dead_letter_topic", f"{name}.dlq")
    dlq = _topic(dlq, "dead_letter_topic")
    if dlq in parsed_topics:
        raise ValidationError("dead_letter_topic", "must differ from the subscribed topics")
    if not (stored or internal) and (dlq.startswith("__") or dlq == f"{name}.retry"):
        # An internal topic (__consumer_offsets refuses writes: the record would never settle;
        # __ferry_offsets would take dead letters as offset state) or the retry topic (its dead
        # letters would be pushed again, failing in a loop).
        raise ValidationError(
            "dead_letter_topic", f"must not be an internal topic (starting with '__') or the retry topic {name}.retry"
        )
    return Subscription(
        name=name,
        topics=parsed_topics,
        endpoint=endpoint,
        ordering=ordering,  # type: ignore[arg-type]
        max_in_flight=max_in_flight,
        retry=retry,
        dead_letter_topic=dlq,
        start_from=_choice(doc, "start_from", "earliest", STARTS),
        state=_choice(doc, "state", "active", STATES),
        batch=batch,
        filter=filter_doc,
        delay_ms=_int_in(doc, "delay_ms", "delay_ms", 0, 0, MAX_CONSUMER_DELAY_MS),
        concurrency=_concurrency(doc.get("concurrency"), max_in_flight),
        clusters=_clusters(doc.get("clusters"), clusters),
    )


def _concurrency(value: Any, max_in_flight: int) -> ConcurrencySpec | None:
    if value is None:
        return None
    c = _obj(value, "concurrency")
    _no_extra(c, frozenset({"mode", "min", "max"}), "concurrency.")
    mode = c.get("mode", "fixed")
    if mode not in ("fixed", "adaptive"):
        raise ValidationError("concurrency.mode", f"must be 'fixed' or 'adaptive', got {mode!r}")
    if mode == "fixed":
        return None
    lo = _int_in(c, "min", "concurrency.min", 1, 1, 10_000)
    hi = _int_in(c, "max", "concurrency.max", max_in_flight, 1, 10_000)
    if hi < lo:
        raise ValidationError("concurrency.max", "must be >= concurrency.min")
    return ConcurrencySpec("adaptive", lo, hi)


def from_trusted(doc: Mapping[str, Any]) -> Subscription:
    """Parse a document Ferry itself stored (ZooKeeper, database): unmasked, already valid."""
    return parse(dict(doc), internal=True, stored=True)
