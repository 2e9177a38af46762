"""Settings: one frozen dataclass tree, loaded from ``ferry.toml`` and the environment (env wins).

Every setting is a field of the tree declared with :func:`setting` (its environment variable,
parser and secrecy beside its type and default) and described by the docstring under it.
:data:`SETTINGS` is derived from those fields, and the table in ``docs/operations.md`` is
generated from them (``python3 -m ferry.settings_doc``); ``ferry config`` prints the effective
values with secrets masked, and :func:`value` reads one setting alone.

A ``ferry.toml`` may use either the environment name (``FERRY_ZK_CONNECT = "..."``) or the
lower-case name without the prefix (``zk_connect = "..."``), at top level.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.errors import ConfigError

# --- how a setting's text becomes its value ------------------------------------------------


def _int(name: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ConfigError(name, f"expected an integer, got {raw!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ConfigError(name, f"expected an integer, got {raw!r}") from None


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, f"expected true or false, got {raw!r}")


def _str(name: str, raw: Any) -> str:
    return str(raw)


def _token(name: str, raw: Any) -> str:
    """A bearer token: surrounding whitespace is no part of it (an HTTP header value cannot carry
    it), e.g. the newline a token file mounted from a Kubernetes Secret often ends with."""
    return str(raw).strip()


def _csv(name: str, raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    return tuple(str(i).strip() for i in items if str(i).strip())


def _json_object(name: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(name, f"expected a JSON object of librdkafka settings: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(name, "expected a JSON object of librdkafka settings")
    return value


_BY_TYPE: dict[str, Callable[[str, Any], Any]] = {"str": _str, "int": _int, "bool": _bool, "tuple[str, ...]": _csv}
"""The parser of a setting whose field does not name one, by the field's annotation."""


def setting(
    env: str,
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    parse: Callable[[str, Any], Any] | None = None,
    secret: bool = False,
) -> Any:
    """A field of the settings tree that is a setting: ``env`` names its environment variable
    (and its ``ferry.toml`` key); ``parse`` turns its text into the value (by default, from the
    field's type); a ``secret`` one is masked wherever settings are shown."""
    meta = {"env": env, "parse": parse, "secret": secret}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# --- the settings tree ----------------------------------------------------------------------


@dataclass(frozen=True)
class ZooKeeperSettings:
    connect: str = setting("FERRY_ZK_CONNECT", "127.0.0.1:2181")
    """ZooKeeper connect string (``host:port[,host:port...]``)."""
    session_timeout_ms: int = setting("FERRY_ZK_SESSION_TIMEOUT_MS", 10_000)
    """A worker silent for this long loses its session and, with it, its partitions."""


DEFAULT_KAFKA_CLUSTER = "default"
"""The name of the cluster of ``FERRY_KAFKA_BOOTSTRAP``."""
CLUSTER_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class KafkaCluster:
    """One further Kafka cluster of ``FERRY_KAFKA_CLUSTERS``."""

    bootstrap: str
    """Its bootstrap servers."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """librdkafka settings for its clients (security, SASL, TLS); the default cluster's
    ``FERRY_KAFKA_CONFIG`` does not apply to it."""
    zone: str = ""
    """The zone whose workers consume it while any is alive."""


def _clusters(name: str, raw: Any) -> dict[str, KafkaCluster]:
    """``FERRY_KAFKA_CLUSTERS``: ``{"dc2": {"bootstrap": "...", "config": {...}, "zone": "dc2"}}``."""
    try:
        doc = raw if isinstance(raw, Mapping) else json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(name, f"expected a JSON object of cluster name to settings: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(name, 'expected a JSON object, e.g. {"dc2": {"bootstrap": "kafka.dc2:9092", "zone": "dc2"}}')
    out: dict[str, KafkaCluster] = {}
    for cluster, spec in doc.items():
        where = f"{name}.{cluster}"
        if cluster == DEFAULT_KAFKA_CLUSTER:
            raise ConfigError(where, "'default' is the cluster of FERRY_KAFKA_BOOTSTRAP; give this one another name")
        if not isinstance(cluster, str) or not CLUSTER_NAME_RE.fullmatch(cluster):
            raise ConfigError(where, "a cluster name must match [a-z0-9][a-z0-9_-]{0,39}")
        if not isinstance(spec, Mapping):
            raise ConfigError(where, 'expected an object: {"bootstrap": "...", "config": {...}, "zone": "..."}')
        extra = set(spec) - {"bootstrap", "config", "zone"}
        if extra:
            raise ConfigError(f"{where}.{sorted(extra)[0]}", "unknown field; allowed: bootstrap, config, zone")
        bootstrap, config, zone = spec.get("bootstrap"), spec.get("config", {}), spec.get("zone", "")
        if not isinstance(bootstrap, str) or not bootstrap:
            raise ConfigError(f"{where}.bootstrap", "is required: the cluster's bootstrap servers (host:port,...)")
        if not isinstance(config, Mapping):
            raise ConfigError(f"{where}.config", "must be an object of librdkafka settings")
        if not isinstance(zone, str):
            raise ConfigError(f"{where}.zone", "must be a zone name (a string)")
        out[cluster] = KafkaCluster(bootstrap, dict(config), zone)
    return out


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str = setting("FERRY_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    """Kafka bootstrap servers."""
    config: Mapping[str, Any] = setting("FERRY_KAFKA_CONFIG", factory=dict, parse=_json_object, secret=True)
    """Extra librdkafka settings as a JSON object (``security.protocol``, ``sasl.*``, ``ssl.*``),
    applied to every client of the ``default`` cluster. A property or value librdkafka refuses
    stops the process at start."""
    offsets_topic: str = setting("FERRY_OFFSETS_TOPIC", "__ferry_offsets")
    """The log-compacted topic holding each partition's merged offset state (created if missing;
    one in each Kafka cluster)."""
    fetch_wait_max_ms: int = setting("FERRY_FETCH_WAIT_MAX_MS", 10)
    """How long the broker may hold a fetch for data: the main latency knob (it bounds idle
    delivery latency, and on a broker that waits it out, a commit's wait for the gateway's view
    of the transaction log)."""
    delay_topic: str = setting("FERRY_DELAY_TOPIC", "__ferry_delay")
    """Where delayed records wait to be scheduled (plain producers write here with ``ferry-deliver-at``
    and ``ferry-target-topic``; invalid ones go to ``<FERRY_DELAY_TOPIC>.dlq``)."""
    txn_topic: str = setting("FERRY_TXN_TOPIC", "__ferry_txn")
    """The transaction log: prepared (half) messages and their outcomes (docs/transactions.md)."""
    idempotency_topic: str = setting("FERRY_IDEMPOTENCY_TOPIC", "__ferry_idempotency")
    """The gateway's memory of ``Idempotency-Key`` answers (log-compacted, 24 h)."""
    clusters: Mapping[str, KafkaCluster] = setting("FERRY_KAFKA_CLUSTERS", factory=dict, parse=_clusters, secret=True)
    """Further Kafka clusters as JSON, ``{"dc2": {"bootstrap": ..., "config": {...}, "zone": ...}}``
    (docs/zones.md): a subscription listing one in ``clusters`` consumes its topics there too.
    ``ferry config`` shows each one's bootstrap and zone."""
    default_zone: str = setting("FERRY_DEFAULT_KAFKA_ZONE", "")
    """The zone of the ``default`` cluster (the one of ``FERRY_KAFKA_BOOTSTRAP``)."""
    name: str = DEFAULT_KAFKA_CLUSTER
    """Which cluster these settings reach (see :meth:`for_cluster`)."""

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration for one client: bootstrap, extra settings, then overrides."""
        return {"bootstrap.servers": self.bootstrap, **self.config, **overrides}

    def cluster_names(self) -> tuple[str, ...]:
        """``default`` first, then the further clusters in name order."""
        return (DEFAULT_KAFKA_CLUSTER, *sorted(self.clusters))

    def zone_of(self, cluster: str) -> str:
        """The zone a cluster's partitions prefer; an unknown cluster has none."""
        if cluster == DEFAULT_KAFKA_CLUSTER:
            return self.default_zone
        found = self.clusters.get(cluster)
        return found.zone if found is not None else ""

    def for_cluster(self, cluster: str) -> KafkaSettings:
        """These settings aimed at another cluster: its bootstrap and librdkafka settings, the same
        topic names (each cluster keeps its own offsets topic under the same name)."""
        if cluster == self.name:
            return self
        if cluster == DEFAULT_KAFKA_CLUSTER:
            raise ConfigError("FERRY_KAFKA_CLUSTERS", "settings for another cluster cannot reach back to default")
        found = self.clusters.get(cluster)
        if found is None:
            known = ", ".join(self.cluster_names())
            raise ConfigError("FERRY_KAFKA_CLUSTERS", f"no Kafka cluster named {cluster!r}; configured: {known}")
        return dataclasses.replace(self, bootstrap=found.bootstrap, config=found.config, name=cluster)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = setting("FERRY_DB_URL", "sqlite:///ferry.db", secret=True)
    """SQLAlchemy URL of the metadata database (``mysql+pymysql://…`` in production)."""


@dataclass(frozen=True)
class WorkerSettings:
    id: str = setting("FERRY_WORKER_ID", "")
    """A worker's stable id; empty means hostname + pid."""
    metrics_port: int = setting("FERRY_WORKER_METRICS_PORT", 9101)
    """Port of the worker's ``/metrics``, ``/healthz``, ``/readyz`` and ``/stats`` (0 picks a free one)."""
    drain_timeout_ms: int = setting("FERRY_DRAIN_TIMEOUT_MS", 10_000)
    """On release or SIGTERM, how long in-flight pushes may finish before they are abandoned; the
    final offset writes then get half of it (1–10 s). See "Shutdown" below."""
    offset_flush_interval_ms: int = setting("FERRY_OFFSET_FLUSH_INTERVAL_MS", 500)
    """How often each partition's offset state is written to the offsets topic."""
    prefetch_records: int = setting("FERRY_PREFETCH_RECORDS", 20_000)
    """Records fetched ahead per partition, at most. At 5/8 of a partition's bound its fetch holds,
    at the bound it is paused (see "Backpressure" below)."""
    prefetch_budget_records: int = setting("FERRY_PREFETCH_BUDGET_RECORDS", 240_000)
    """Records fetched ahead by the whole worker: each partition's bound is at most this divided by
    the partitions the worker owns (never below 100), so few partitions fetch deep and many do not
    multiply memory."""
    prefetch_bytes: int = setting("FERRY_PREFETCH_BYTES", 16 * 1024 * 1024)
    """Bytes fetched ahead per partition; holds and pauses as ``FERRY_PREFETCH_RECORDS`` does."""
    prefetch_budget_bytes: int = setting("FERRY_PREFETCH_BUDGET_BYTES", 128 * 1024 * 1024)
    """Bytes fetched ahead by the whole worker: each partition's bound is at most this divided by
    the partitions the worker owns (never below 64 KiB), so memory does not grow with them."""
    fetch_batch_records: int = setting("FERRY_FETCH_BATCH_RECORDS", 250)
    """Records the fetch thread takes from librdkafka at once, at most (never more than 3/8 of a
    partition's record bound). It holds the GIL while it turns them into records, and the event
    loop waits meanwhile; see "Backpressure" below."""

    native: bool = setting("FERRY_NATIVE", True)
    """Use the C speedups when they are built (the worker's, and the gateway's too); ``false`` runs
    the pure-Python path."""
    zone: str = setting("FERRY_ZONE", "")
    """This worker's zone (datacenter, availability zone): it is given the partitions of the
    Kafka clusters of its zone, and others' only while their zone has no live worker."""

    def resolved_id(self) -> str:
        return self.id or f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class CoordinatorSettings:
    metrics_port: int = setting("FERRY_COORDINATOR_METRICS_PORT", 9102)
    """Port of the coordinator's ``/metrics``, ``/healthz`` and ``/readyz`` (0 picks a free one)."""
    subscription_poll_ms: int = setting("FERRY_SUBSCRIPTION_POLL_MS", 5_000)
    """Fallback poll of the metadata database; changes made in the portal arrive at once."""
    topic_poll_ms: int = setting("FERRY_TOPIC_POLL_MS", 10_000)
    """How often partition counts of subscribed topics are re-read (new partitions)."""
    internal_work: bool = setting("FERRY_INTERNAL_WORK", True)
    """Plan Ferry's own work (the delay store, transaction back-checks) onto the workers. Turn it
    off only for a cluster that never takes delayed or transactional records."""


@dataclass(frozen=True)
class PortalSettings:
    host: str = setting("FERRY_PORTAL_HOST", "127.0.0.1")
    """Address the portal listens on."""
    port: int = setting("FERRY_PORTAL_PORT", 8080)
    """Port of the portal (REST API, UI, ``/metrics``, ``/healthz``)."""
    admin_token: str = setting("FERRY_ADMIN_TOKEN", "", parse=_token, secret=True)
    """Bootstrap admin API token; the portal refuses to start without one."""
    endpoint_allow: tuple[str, ...] = setting("FERRY_ENDPOINT_ALLOW", ())
    """CIDRs or host patterns push endpoints may target; empty = any but link-local/metadata."""
    max_body_bytes: int = setting("FERRY_MAX_BODY_BYTES", 1024 * 1024)
    """Largest request body the portal's and the gateway's APIs accept."""
    history_interval_ms: int = setting("FERRY_PORTAL_HISTORY_INTERVAL_MS", 10_000)
    """How often the portal samples every subscription's lag, delivery, retry and dead-letter
    rates for its health badges and charts; the last hour of samples is kept in the metadata
    database, shared by every portal replica (give them all the same value)."""


@dataclass(frozen=True)
class GatewaySettings:
    host: str = setting("FERRY_GATEWAY_HOST", "127.0.0.1")
    """Address the gateway listens on."""
    port: int = setting("FERRY_GATEWAY_PORT", 8081)
    """Port of the gateway (produce API, ``/metrics``, ``/healthz``)."""
    max_in_flight_bytes: int = setting("FERRY_GATEWAY_MAX_IN_FLIGHT_BYTES", 64 * 1024 * 1024)
    """Bytes of records accepted but not yet acknowledged by the brokers; beyond it requests are
    answered 503 with ``Retry-After`` at once, so memory stays bounded whatever the load."""
    produce_timeout_ms: int = setting("FERRY_GATEWAY_PRODUCE_TIMEOUT_MS", 15_000)
    """How long a produce request may wait for the brokers' acknowledgements: it is answered by
    then (504 for records sent and not acknowledged, whose outcome is unknown)."""
    token_cache_ms: int = setting("FERRY_GATEWAY_TOKEN_CACHE_MS", 10_000)
    """How long a token looked up in the database is trusted: a token revoked in the portal stops
    working within this time. Known tokens keep working while the database is down."""
    read_timeout_ms: int = setting("FERRY_GATEWAY_READ_TIMEOUT_MS", 10_000)
    """A client must send a request's headers and body within this time (slow clients are cut off)."""
    linger_ms: int = setting("FERRY_GATEWAY_LINGER_MS", 1)
    """How long the gateway's producer of records waits to fill a batch. Requests from many clients
    share batches anyway (records queue while a batch is in flight); a longer wait adds to every
    request's latency (bench/gateway.py: 1 ms did 2.5× the requests/s of 5 ms with 32 clients)."""
    txn_linger_ms: int = setting("FERRY_TXN_LINGER_MS", 0)
    """How long the transaction log's producer (a transaction's entries, and its records at commit)
    waits to fill a batch. A transaction is three writes in a row, each waiting this long: with 0,
    one client at a time did 2.2× the transactions/s of 1 ms, and 256 clients 4–5 % more (two
    interleaved pairs, bench/transactions.py's client)."""
    txn_busy_linger_ms: int = setting("FERRY_TXN_BUSY_LINGER_MS", 2)
    """The linger of a second producer of the transaction log, which takes its entries (and a
    commit's records) while at least ``FERRY_TXN_BUSY_AT`` wait for their acknowledgements (0: no
    second producer). They then travel dozens to a produce request instead of a few: with 2, a
    gateway did 8–14 % more transactions/s from 8 to 256 clients, the same with one, and the
    embedded broker spent a third less CPU per transaction (bench/transactions.py's client)."""
    txn_busy_at: int = setting("FERRY_TXN_BUSY_AT", 16)
    """Entries of the transaction log waiting for their acknowledgements from which new ones go
    through the lingering producer (``FERRY_TXN_BUSY_LINGER_MS``); back to the quick one at a
    quarter of it, at most one switch a second."""
    txn_sticky_ms: int = setting("FERRY_TXN_STICKY_MS", 100)
    """How long a gateway prepares transactions in one partition of the transaction log before it
    moves to another, at random. Concurrent transactions' entries then travel in one batch per
    request, where a broker spends CPU per partition's batch: at 256 transactions in flight, 100
    cost the embedded broker about a fifth less CPU per transaction than 0 (a new partition per
    prepare), and did about 6 % more transactions/s (five interleaved pairs, bench/transactions.py's
    client). Over time every partition, so every worker's back-checks, gets its share."""
    txn_max_checks: int = setting("FERRY_TXN_MAX_CHECKS", 15)
    """Back-checks of a transaction answered unknown before it is rolled back."""


@dataclass(frozen=True)
class SparkSettings:
    master: str = setting("FERRY_SPARK_MASTER", "")
    """Spark master URL for ``ferry replay``; empty = ``local[*]`` (or what ``spark-submit`` says)."""
    shuffle_partitions: int = setting("FERRY_SPARK_SHUFFLE_PARTITIONS", 8)
    """``spark.sql.shuffle.partitions`` of the replay job."""
    driver_memory: str = setting("FERRY_SPARK_DRIVER_MEMORY", "2g")
    """``spark.driver.memory`` of the replay job."""


@dataclass(frozen=True)
class LogSettings:
    level: str = setting("FERRY_LOG_LEVEL", "INFO")
    """The lowest level logged: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR``."""
    format: str = setting("FERRY_LOG_FORMAT", "json")
    """``json`` (one object per line) or ``text`` (``key=value``)."""


@dataclass(frozen=True)
class Settings:
    cluster: str = setting("FERRY_CLUSTER", "default")
    """Cluster name; every znode lives under ``/ferry/<cluster>``."""
    metrics_host: str = setting("FERRY_METRICS_HOST", "127.0.0.1")
    """Address the worker's and coordinator's ``/metrics``/``/healthz`` servers listen on (``0.0.0.0`` in a pod)."""
    zookeeper: ZooKeeperSettings = field(default_factory=ZooKeeperSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    coordinator: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    portal: PortalSettings = field(default_factory=PortalSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    log: LogSettings = field(default_factory=LogSettings)


@dataclass(frozen=True)
class Setting:
    env: str
    path: str
    parse: Callable[[str, Any], Any]
    secret: bool = False
    declared: dataclasses.Field[Any] | None = None
    """The dataclass field that declares it (its default, its metadata)."""
    owner: str = ""
    """The name of the settings class the field belongs to (where its docstring is)."""


def _derive(cls: type, prefix: str = "") -> list[Setting]:
    """Every field of the tree that carries :func:`setting` metadata, in the tree's order."""
    out: list[Setting] = []
    for f in dataclasses.fields(cls):
        if "env" in f.metadata:
            parse = f.metadata["parse"] or _BY_TYPE[str(f.type)]
            out.append(Setting(f.metadata["env"], prefix + f.name, parse, f.metadata["secret"], f, cls.__name__))
        elif isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory):
            out += _derive(f.default_factory, f"{prefix}{f.name}.")
    return out


SETTINGS: tuple[Setting, ...] = tuple(_derive(Settings))
"""Every setting: its environment variable, its place in the tree, its parser. Derived from the
dataclasses above, so a setting exists exactly where its field is."""
_BY_ENV = {s.env: s for s in SETTINGS}
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError("--config", f"file {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror or exc}") from None
    out: dict[str, Any] = {}
    for key, value in data.items():
        env = key if key.startswith("FERRY_") else "FERRY_" + key.upper()
        if env not in _BY_ENV:
            known = ", ".join(sorted(s.env.removeprefix("FERRY_").lower() for s in SETTINGS))
            raise ConfigError(key, f"unknown setting in {path}; known settings: {known}")
        out[env] = value
    return out


def _check_librdkafka(name: str, client_settings: Mapping[str, Any]) -> None:
    """Refuse at start what every Kafka client would refuse later, each with a traceback."""
    if not client_settings:
        return
    from ferry import kafka

    problem = kafka.settings_problem(client_settings)
    if problem:
        raise ConfigError(name, f"librdkafka refuses these settings: {problem}")


def _validate(s: Settings) -> None:
    def positive(name: str, value: int) -> None:
        if value <= 0:
            raise ConfigError(name, f"must be > 0, got {value}")

    def port(name: str, value: int) -> None:
        if not 0 <= value <= 65535:
            raise ConfigError(name, f"must be a port number 0-65535, got {value}")

    positive("FERRY_ZK_SESSION_TIMEOUT_MS", s.zookeeper.session_timeout_ms)
    positive("FERRY_DRAIN_TIMEOUT_MS", s.worker.drain_timeout_ms)
    positive("FERRY_OFFSET_FLUSH_INTERVAL_MS", s.worker.offset_flush_interval_ms)
    positive("FERRY_PREFETCH_RECORDS", s.worker.prefetch_records)
    positive("FERRY_PREFETCH_BYTES", s.worker.prefetch_bytes)
    positive("FERRY_PREFETCH_BUDGET_BYTES", s.worker.prefetch_budget_bytes)
    positive("FERRY_PREFETCH_BUDGET_RECORDS", s.worker.prefetch_budget_records)
    positive("FERRY_FETCH_BATCH_RECORDS", s.worker.fetch_batch_records)
    positive("FERRY_SUBSCRIPTION_POLL_MS", s.coordinator.subscription_poll_ms)
    positive("FERRY_TOPIC_POLL_MS", s.coordinator.topic_poll_ms)
    positive("FERRY_MAX_BODY_BYTES", s.portal.max_body_bytes)
    positive("FERRY_PORTAL_HISTORY_INTERVAL_MS", s.portal.history_interval_ms)
    positive("FERRY_GATEWAY_MAX_IN_FLIGHT_BYTES", s.gateway.max_in_flight_bytes)
    positive("FERRY_GATEWAY_PRODUCE_TIMEOUT_MS", s.gateway.produce_timeout_ms)
    positive("FERRY_GATEWAY_TOKEN_CACHE_MS", s.gateway.token_cache_ms)
    positive("FERRY_GATEWAY_READ_TIMEOUT_MS", s.gateway.read_timeout_ms)
    positive("FERRY_TXN_MAX_CHECKS", s.gateway.txn_max_checks)
    if s.gateway.linger_ms < 0:
        raise ConfigError("FERRY_GATEWAY_LINGER_MS", "must be >= 0")
    if s.gateway.txn_linger_ms < 0:
        raise ConfigError("FERRY_TXN_LINGER_MS", "must be >= 0")
    if s.gateway.txn_busy_linger_ms < 0:
        raise ConfigError("FERRY_TXN_BUSY_LINGER_MS", "must be >= 0")
    if s.gateway.txn_busy_at < 1:
        raise ConfigError("FERRY_TXN_BUSY_AT", "must be >= 1")
    if s.gateway.txn_sticky_ms < 0:
        raise ConfigError("FERRY_TXN_STICKY_MS", "must be >= 0")
    for name, topic in (
        ("FERRY_OFFSETS_TOPIC", s.kafka.offsets_topic),
        ("FERRY_DELAY_TOPIC", s.kafka.delay_topic),
        ("FERRY_TXN_TOPIC", s.kafka.txn_topic),
        ("FERRY_IDEMPOTENCY_TOPIC", s.kafka.idempotency_topic),
    ):
        if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise ConfigError(name, f"must be a Kafka topic name (a-z A-Z 0-9 . _ -), got {topic!r}")
    _check_librdkafka("FERRY_KAFKA_CONFIG", s.kafka.config)
    for name, cluster in s.kafka.clusters.items():
        _check_librdkafka(f"FERRY_KAFKA_CLUSTERS.{name}.config", cluster.config)
    if s.kafka.fetch_wait_max_ms < 0:
        raise ConfigError("FERRY_FETCH_WAIT_MAX_MS", "must be >= 0")
    for name, value in (
        ("FERRY_WORKER_METRICS_PORT", s.worker.metrics_port),
        ("FERRY_COORDINATOR_METRICS_PORT", s.coordinator.metrics_port),
        ("FERRY_PORTAL_PORT", s.portal.port),
        ("FERRY_GATEWAY_PORT", s.gateway.port),
    ):
        port(name, value)
    for entry in s.portal.endpoint_allow:
        # A host pattern has no '/': an entry with one is meant as a CIDR, and a typo there would
        # otherwise be taken as a pattern that matches nothing.
        if "/" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ConfigError(
                    "FERRY_ENDPOINT_ALLOW", f"{entry!r} is not a CIDR ({exc}); e.g. 10.0.0.0/8 or fd00::/8"
                ) from None
    if "/" in s.worker.id or s.worker.id in (".", ".."):
        # It names the worker's ZooKeeper node: a '/' or a relative name is no node name.
        raise ConfigError("FERRY_WORKER_ID", f"must be a name without '/' (not . or ..), got {s.worker.id!r}")
    if not s.cluster or "/" in s.cluster:
        raise ConfigError("FERRY_CLUSTER", f"must be a non-empty name without '/', got {s.cluster!r}")
    if not s.zookeeper.connect:
        raise ConfigError("FERRY_ZK_CONNECT", "must not be empty")
    if not s.kafka.bootstrap:
        raise ConfigError("FERRY_KAFKA_BOOTSTRAP", "must not be empty")
    if s.log.format not in ("json", "text"):
        raise ConfigError("FERRY_LOG_FORMAT", f"must be 'json' or 'text', got {s.log.format!r}")
    if s.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("FERRY_LOG_LEVEL", f"must be DEBUG, INFO, WARNING or ERROR, got {s.log.level!r}")


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = tree
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def load(config_file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Effective settings: defaults, then ``config_file``, then the environment."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = _read_toml(Path(config_file)) if config_file else {}
    raw.update({k: v for k, v in env.items() if k in _BY_ENV})
    tree: dict[str, Any] = {}
    for name, value in raw.items():
        setting = _BY_ENV[name]
        _set(tree, setting.path, setting.parse(name, value))
    base = Settings()
    sections: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        current = getattr(base, f.name)
        if dataclasses.is_dataclass(current):
            sections[f.name] = dataclasses.replace(current, **tree.get(f.name, {}))  # type: ignore[type-var]
    top = {k: v for k, v in tree.items() if not isinstance(v, dict)}
    settings = dataclasses.replace(base, **sections, **top)
    _validate(settings)
    return settings


def value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """One setting from the environment, parsed, or its default: for code that runs before (or
    without) the whole tree, like the choice of the C speedups or a Spark session."""
    env = os.environ if env is None else env
    setting = _BY_ENV[name]
    if name in env:
        return setting.parse(name, env[name])
    node: Any = Settings()
    for part in setting.path.split("."):
        node = getattr(node, part)
    return node


def describe(settings: Settings) -> dict[str, Any]:
    """Every setting by environment name, secrets masked: safe to log or print."""
    out: dict[str, Any] = {}
    for s in SETTINGS:
        value: Any = settings
        for part in s.path.split("."):
            value = getattr(value, part)
        if s.env == "FERRY_KAFKA_CLUSTERS":
            # Where each cluster is stays visible; its librdkafka settings may hold passwords.
            value = {
                name: {"bootstrap": c.bootstrap, "zone": c.zone, "config": "***" if c.config else {}}
                for name, c in value.items()
            }
        elif s.secret and value:
            value = mask_url_password(value) if s.env == "FERRY_DB_URL" else "***"
        elif s.env == "FERRY_WORKER_ID" and not value:
            value = f"{socket.gethostname()}-<pid>"  # each worker process fills in its own pid
        out[s.env] = value
    return out


def mask_url_password(url: str) -> str:
    """A database URL with only its password masked (``mysql+pymysql://ferry:***@db:3306/ferry``),
    so what it points at stays visible."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user, colon, _password = creds.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"
