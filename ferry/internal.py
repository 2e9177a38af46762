"""Ferry's own work, planned like subscriptions: the delay store and the transaction back-checks.

Use case: some work must run exactly once somewhere and survive the death of any process — moving
delayed records through their level topics when due (docs/delay.md), and asking producers about
transactions left unresolved (docs/transactions.md). Both read Kafka partitions in order and must
commit progress only past what is done, which is exactly what a subscription's partition runner
does. So they *are* subscriptions, with reserved names (``ferry-internal.…``) that users cannot
register: the coordinator adds them to every plan, workers own their partitions with the same
fencing, handoff, offset merge and restore, and a worker hands their records to an internal sink
(:mod:`ferry.worker.sinks`) instead of an HTTP endpoint.

Both use ``ordering: none`` with a large in-flight limit: each record waits for its own moment (its
due time, its transaction's outcome) while later ones go on, and the partition's committed offset
stays at the oldest record not yet done. The prefetch bound keeps only a partition's head window in
memory, however many records wait behind it.
"""

from __future__ import annotations

from ferry import delay
from ferry.config import Settings
from ferry.subscription import INTERNAL_PREFIX, Endpoint, RetryPolicySpec, Subscription

TXN = f"{INTERNAL_PREFIX}txn"
DELAY = f"{INTERNAL_PREFIX}delay"
IN_FLIGHT = 10_000
"""A transaction-log partition's entries wait in flight for their checks: room for many."""
DELAY_IN_FLIGHT = 1_000
"""A delay partition's records are in flight while they are moved, or held in memory for the last
second before they are due (a level admits a record when it is nearly due): room for 1,000 records
due within a second per partition, and the memory of an intake burst bounded (docs/design/delay.md)."""
TXN_PARTITIONS = 9
DELAY_PARTITIONS = 9


def subscriptions(settings: Settings) -> list[Subscription]:
    """The internal subscriptions of a cluster with these settings."""
    k = settings.kafka
    common = {
        "ordering": "none",
        "max_in_flight": IN_FLIGHT,
        "retry": RetryPolicySpec(max_attempts=1000, initial_backoff_ms=100, max_backoff_ms=5_000),
        "start_from": "earliest",
    }
    return [
        Subscription(
            name=TXN,
            topics=(k.txn_topic,),
            endpoint=Endpoint("http://ferry.internal/txn"),
            dead_letter_topic=f"{k.txn_topic}.dlq",
            **common,  # type: ignore[arg-type]
        ),
        Subscription(
            name=DELAY,
            topics=(k.delay_topic, *(t for t, _, _ in delay.level_topics(k.delay_topic))),
            endpoint=Endpoint("http://ferry.internal/delay"),
            dead_letter_topic=f"{k.delay_topic}.dlq",
            **{**common, "max_in_flight": DELAY_IN_FLIGHT},  # type: ignore[arg-type]
        ),
    ]


def topics(settings: Settings) -> list[tuple[str, int, dict[str, str]]]:
    """Every topic the internal work needs: (name, partitions, config). The coordinator creates
    those that do not exist."""
    k = settings.kafka
    week = str(7 * 24 * 3600 * 1000)
    out = [
        (k.txn_topic, TXN_PARTITIONS, {"retention.ms": week}),
        (k.delay_topic, DELAY_PARTITIONS, {"retention.ms": week}),
        (f"{k.delay_topic}.dlq", 1, {}),
    ]
    out += [(name, parts, {"retention.ms": str(keep)}) for name, parts, keep in delay.level_topics(k.delay_topic)]
    return out


def own_topics(settings: Settings) -> frozenset[str]:
    """Every topic Ferry keeps its own state in, whatever its configured name: no delayed record
    is ever delivered to one (besides these, every ``__``-prefixed topic is refused as internal)."""
    k = settings.kafka
    return frozenset(
        {
            k.offsets_topic,
            k.idempotency_topic,
            f"{k.txn_topic}.dlq",
            *(name for name, _, _ in topics(settings)),
        }
    )
