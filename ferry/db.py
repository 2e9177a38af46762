"""The metadata database (SQLAlchemy 2): subscriptions, API tokens, audit log, the portal's history.

Used by the portal (reads and writes) and the coordinator (reads subscriptions, cached, so a
database outage never stops delivery). Workers never touch it: the coordinator publishes what
they need to ZooKeeper. The schema is created and evolved only by Alembic (``ferry migrate``);
``tests/integration/test_migrations.py`` proves the migrations and these models never drift.

A subscription row holds every field of the docs/contract.md §3 document in its own column,
so operators can query it with SQL; :func:`to_subscription` turns a row back into the one
validated :class:`ferry.subscription.Subscription`. API tokens are stored as SHA-256 hashes
only: a leaked table does not leak a usable token. Audit entries never carry secrets.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from ferry.digits import ascii_digits
from ferry.errors import ConfigError
from ferry.subscription import Subscription, from_trusted

Scope = Literal["admin", "read", "produce"]
SCOPES: tuple[Scope, ...] = ("admin", "read", "produce")

# Explicit constraint names: Alembic can then compare and drop them the same way on every backend.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Naive UTC: MySQL DATETIME has no zone, and every timestamp here is UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING)


class SubscriptionRow(Base):
    __tablename__ = "subscriptions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(63), unique=True)
    topics: Mapped[list[str]] = mapped_column(sa.JSON)
    endpoint_url: Mapped[str] = mapped_column(sa.String(2048))
    endpoint_timeout_ms: Mapped[int] = mapped_column(sa.Integer)
    # Secret values: returned masked by the API, never logged or audited.
    endpoint_headers: Mapped[dict[str, str]] = mapped_column(sa.JSON)
    ordering: Mapped[str] = mapped_column(sa.String(16))
    max_in_flight: Mapped[int] = mapped_column(sa.Integer)
    retry_max_attempts: Mapped[int] = mapped_column(sa.Integer)
    retry_initial_backoff_ms: Mapped[int] = mapped_column(sa.Integer)
    retry_max_backoff_ms: Mapped[int] = mapped_column(sa.Integer)
    retry_mode: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    """None: ``memory`` (every subscription made before durable retries)."""
    dead_letter_topic: Mapped[str] = mapped_column(sa.String(249))
    start_from: Mapped[str] = mapped_column(sa.String(16))
    state: Mapped[str] = mapped_column(sa.String(16))
    # Batch push mode; all three null = one record per POST.
    batch_max_records: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    batch_max_bytes: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    batch_linger_ms: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    # The subscription's filter document (docs/filters.md); null = every record.
    filter: Mapped[Any] = mapped_column(sa.JSON, nullable=True)
    # Delayed consumption: push no earlier than the record's timestamp + delay_ms.
    delay_ms: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    # Adaptive concurrency ({"mode", "min", "max"}); null = fixed max_in_flight.
    concurrency: Mapped[Any] = mapped_column(sa.JSON, nullable=True)
    # The Kafka clusters consumed (docs/zones.md); null = ["default"].
    clusters: Mapped[Any] = mapped_column(sa.JSON, nullable=True)
    # Bumped on every change; lets the coordinator and the UI see that a document moved on.
    version: Mapped[int] = mapped_column(sa.Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(sa.DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(sa.DateTime, default=utcnow)

    def to_subscription(self) -> Subscription:
        batch = None
        if self.batch_max_records is not None:
            batch = {
                "max_records": self.batch_max_records,
                "max_bytes": self.batch_max_bytes,
                "linger_ms": self.batch_linger_ms,
            }
        return from_trusted(
            {
                "name": self.name,
                "topics": list(self.topics),
                "endpoint": {
                    "url": self.endpoint_url,
                    "timeout_ms": self.endpoint_timeout_ms,
                    "headers": dict(self.endpoint_headers or {}),
                },
                "ordering": self.ordering,
                "max_in_flight": self.max_in_flight,
                "retry": {
                    "max_attempts": self.retry_max_attempts,
                    "initial_backoff_ms": self.retry_initial_backoff_ms,
                    "max_backoff_ms": self.retry_max_backoff_ms,
                    "mode": self.retry_mode or "memory",
                },
                "dead_letter_topic": self.dead_letter_topic,
                "start_from": self.start_from,
                "state": self.state,
                "batch": batch,
                "filter": self.filter,
                "delay_ms": self.delay_ms or 0,
                "concurrency": self.concurrency,
                "clusters": self.clusters,
            }
        )

    def assign(self, sub: Subscription) -> None:
        """Copy every field of a validated subscription into this row."""
        self.name = sub.name
        self.topics = list(sub.topics)
        self.endpoint_url = sub.endpoint.url
        self.endpoint_timeout_ms = sub.endpoint.timeout_ms
        self.endpoint_headers = dict(sub.endpoint.headers)
        self.ordering = sub.ordering
        self.max_in_flight = sub.max_in_flight
        self.retry_max_attempts = sub.retry.max_attempts
        self.retry_initial_backoff_ms = sub.retry.initial_backoff_ms
        self.retry_max_backoff_ms = sub.retry.max_backoff_ms
        self.retry_mode = None if sub.retry.mode == "memory" else sub.retry.mode
        self.dead_letter_topic = sub.dead_letter_topic
        self.start_from = sub.start_from
        self.state = sub.state
        b = sub.batch
        self.batch_max_records = b.max_records if b else None
        self.batch_max_bytes = b.max_bytes if b else None
        self.batch_linger_ms = b.linger_ms if b else None
        self.filter = sub.filter
        self.delay_ms = sub.delay_ms
        c = sub.concurrency
        self.concurrency = None if c is None else {"mode": c.mode, "min": c.min, "max": c.max}
        self.clusters = None if sub.clusters == ("default",) else list(sub.clusters)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    scope: Mapped[str] = mapped_column(sa.String(8))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_by: Mapped[str] = mapped_column(sa.String(100))
    created_at: Mapped[datetime] = mapped_column(sa.DateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(sa.DateTime, nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(sa.DateTime, nullable=True)
    topics: Mapped[list[str] | None] = mapped_column(sa.JSON, nullable=True)
    """A ``produce`` token's topic patterns (``*`` matches any run of characters); None otherwise."""


class AuditEntry(Base):
    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(sa.DateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(sa.String(100))
    action: Mapped[str] = mapped_column(sa.String(64))
    target: Mapped[str] = mapped_column(sa.String(255))
    detail: Mapped[dict[str, Any]] = mapped_column(sa.JSON)


class HistorySample(Base):
    """One sample of the portal's history (:mod:`ferry.portal.history_store`): the portal replica
    that inserts a bucket's row takes that sample; the others skip it."""

    __tablename__ = "history_samples"

    bucket: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True, autoincrement=False)
    """``t_ms // FERRY_PORTAL_HISTORY_INTERVAL_MS``."""
    t_ms: Mapped[int] = mapped_column(sa.BigInteger, index=True)
    taken_by: Mapped[str] = mapped_column(sa.String(255))


class HistoryPoint(Base):
    """A subscription's total (``kafka_partition`` -1, ``topic`` empty) or one partition's point
    in a sample, with the partition owner's counters the next sample is measured against."""

    __tablename__ = "history_points"
    __table_args__ = (sa.Index("ix_history_points_subscription_t_ms", "subscription", "t_ms"),)

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True)
    bucket: Mapped[int] = mapped_column(sa.BigInteger, index=True)
    t_ms: Mapped[int] = mapped_column(sa.BigInteger, index=True)
    subscription: Mapped[str] = mapped_column(sa.String(63))
    cluster: Mapped[str] = mapped_column(sa.String(64))
    topic: Mapped[str] = mapped_column(sa.String(249))
    kafka_partition: Mapped[int] = mapped_column(sa.Integer)
    lag_records: Mapped[int] = mapped_column(sa.BigInteger)
    delivered: Mapped[int] = mapped_column(sa.BigInteger)
    retried: Mapped[int] = mapped_column(sa.BigInteger)
    dead_lettered: Mapped[int] = mapped_column(sa.BigInteger)
    stalled_s: Mapped[float] = mapped_column(sa.Double)
    interval_s: Mapped[float] = mapped_column(sa.Double)
    worker: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    epoch: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    owner_delivered: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    owner_retried: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    owner_dead_lettered: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)


# --- connections ---------------------------------------------------------------------------


def make_engine(url: str) -> Engine:
    """An engine for FERRY_DB_URL; refuses URLs SQLAlchemy cannot use with a clear message."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigError("FERRY_DB_URL", "is not a SQLAlchemy URL (e.g. mysql+pymysql://user:pw@host/db)") from None
    # hide_parameters: SQL parameter values (endpoint header secrets, token hashes) never reach
    # an error message or log line.
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "hide_parameters": True}
    if parsed.get_backend_name() == "sqlite":
        # The portal runs blocking calls in worker threads; SQLite must allow that.
        kwargs["connect_args"] = {"check_same_thread": False}
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    else:
        # Recycle before MySQL's wait_timeout closes idle connections under us.
        kwargs["pool_recycle"] = 1800
    try:
        return sa.create_engine(url, **kwargs)
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        raise ConfigError("FERRY_DB_URL", f"names a database driver that is not installed: {exc}") from None


@contextmanager
def session(engine: Engine) -> Iterator[Session]:
    """One unit of work: committed on success, rolled back on error."""
    factory = sessionmaker(engine, expire_on_commit=False)
    with factory.begin() as s:
        yield s


# --- subscriptions -------------------------------------------------------------------------


SCHEMA_REVISION = "0009"
"""The migration this code expects (``ferry migrate`` applies it; tests/unit/test_layering.py keeps
it equal to the newest file in migrations/versions)."""


def schema_problem(engine: Engine) -> str | None:
    """Blocking: None when the database answers and carries :data:`SCHEMA_REVISION`, else what is
    wrong and what to do, in one line."""
    try:
        with engine.connect() as conn:
            try:
                revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            except sa.exc.DBAPIError:
                revision = None
    except Exception as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"the metadata database is unreachable ({first}): check FERRY_DB_URL"
    if revision != SCHEMA_REVISION:
        found = "no schema" if revision is None else f"schema {revision}"
        if revision is not None and ascii_digits(revision) and int(revision) > int(SCHEMA_REVISION):
            return (
                f"the metadata database has {found}, newer than this Ferry's {SCHEMA_REVISION}: a newer"
                " Ferry migrated it; run that version (there are no downgrades)"
            )
        return f"the metadata database has {found}, this Ferry needs {SCHEMA_REVISION}: run `ferry migrate`"
    return None


def load_subscriptions(engine: Engine) -> list[Subscription]:
    """Every subscription, ordered by name (the coordinator's catalog)."""
    with session(engine) as s:
        rows = s.scalars(sa.select(SubscriptionRow).order_by(SubscriptionRow.name)).all()
        return [r.to_subscription() for r in rows]


def get_row(s: Session, name: str) -> SubscriptionRow | None:
    return s.scalar(sa.select(SubscriptionRow).where(SubscriptionRow.name == name))


def insert_subscription(s: Session, sub: Subscription) -> SubscriptionRow:
    row = SubscriptionRow()
    row.assign(sub)
    row.version = 1
    s.add(row)
    s.flush()
    return row


def update_subscription(s: Session, row: SubscriptionRow, sub: Subscription) -> SubscriptionRow:
    row.assign(sub)
    row.version += 1
    row.updated_at = utcnow()
    s.flush()
    return row


# --- tokens --------------------------------------------------------------------------------


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    s: Session, name: str, scope: Scope, created_by: str, topics: list[str] | None = None
) -> tuple[ApiToken, str]:
    """A new token; the plaintext is returned once and never stored. ``topics``: the patterns a
    ``produce`` token may write to."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    if (scope == "produce") != (topics is not None):
        raise ValueError("topics are given for produce tokens, and only for them")
    plain = "fy_" + secrets.token_urlsafe(32)
    row = ApiToken(name=name, scope=scope, token_hash=hash_token(plain), created_by=created_by, topics=topics)
    s.add(row)
    s.flush()
    return row, plain


def find_token(s: Session, plain: str) -> ApiToken | None:
    """The live token with this plaintext. Lookup is by hash (an index hit), so timing says
    nothing about the stored secrets."""
    row = s.scalar(sa.select(ApiToken).where(ApiToken.token_hash == hash_token(plain)))
    if row is None or row.revoked_at is not None:
        return None
    return row


def list_tokens(s: Session) -> Sequence[ApiToken]:
    return s.scalars(sa.select(ApiToken).order_by(ApiToken.id)).all()


# --- audit ---------------------------------------------------------------------------------


def audit(s: Session, actor: str, action: str, target: str, detail: dict[str, Any] | None = None) -> None:
    """Record who changed what. ``detail`` must already be free of secrets (masked documents)."""
    s.add(AuditEntry(actor=actor, action=action, target=target, detail=detail or {}))


def recent_audit(s: Session, limit: int = 100) -> Sequence[AuditEntry]:
    return s.scalars(sa.select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)).all()


def forget_history(s: Session, subscription: str) -> None:
    """A deleted subscription's history goes with it (a new one of the same name starts empty)."""
    s.execute(sa.delete(HistoryPoint).where(HistoryPoint.subscription == subscription))
