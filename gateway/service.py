"""``ferry gateway``: produce to Kafka over HTTP (docs/gateway.md).

The story of one gateway process: read the settings; open the producer, the topic cache, the token
cache over the metadata database, the idempotency memory and the transaction log; listen; on
SIGTERM stop taking requests, let the ones in flight finish (their records are acknowledged or
failed), flush, and exit. The gateway keeps no state of its own: any number of replicas serve the
same clients, and a restarted one forgets nothing that matters (keys and transactions are in Kafka).

Slow clients cannot hold it: a connection must deliver a whole request (headers and body) within
``FERRY_GATEWAY_READ_TIMEOUT_MS`` of opening, or of its previous answer; otherwise it is closed.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Any

from ferry import db, health, log, runtime
from ferry.config import Settings
from ferry.gateway import records
from ferry.gateway.app import Gateway, create_handler, create_refusal
from ferry.gateway.httpd import Server
from ferry.gateway.idempotency import Idempotency
from ferry.gateway.metrics import GatewayMetrics
from ferry.gateway.producer import Producer
from ferry.gateway.tokens import TokenCache
from ferry.gateway.transactions import Transactions
from ferry.netguard import EndpointPolicy
from ferry.topic_cache import TopicCache
from ferry.txnlog import TxnLog

_log = log.get_logger(__name__)


def build(settings: Settings) -> Gateway:
    """Blocking: every part of a gateway, connected (the CLI, ``ferry dev`` and tests use this)."""
    kafka_config = settings.kafka.client_config()
    g = settings.gateway
    producer = Producer(
        kafka_config,
        max_in_flight_bytes=g.max_in_flight_bytes,
        produce_timeout_ms=g.produce_timeout_ms,
        linger_ms=g.linger_ms,
    )
    engine = db.make_engine(settings.database.url)
    # The two live views (transactions, idempotency keys) fetch with the operator's latency knob.
    wait_ms = settings.kafka.fetch_wait_max_ms
    txn_log = TxnLog(
        kafka_config,
        topic=settings.kafka.txn_topic,
        follow=True,
        follow_wait_ms=wait_ms,
        linger_ms=g.txn_linger_ms,
        sticky_ms=g.txn_sticky_ms,
        busy_linger_ms=g.txn_busy_linger_ms or None,
        busy_at=g.txn_busy_at,
    )

    async def write(txn_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return await txn_log.write_records_async(txn_id, records, g.produce_timeout_ms / 1000)

    return Gateway(
        producer=producer,
        topics=TopicCache(kafka_config),
        tokens=TokenCache(engine, settings.portal.admin_token, g.token_cache_ms / 1000),
        idempotency=Idempotency(
            kafka_config, settings.kafka.idempotency_topic, wait_s=g.produce_timeout_ms / 1000, fetch_wait_ms=wait_ms
        ),
        transactions=Transactions(txn_log, write, EndpointPolicy(settings.portal.endpoint_allow)),
        metrics=GatewayMetrics(),
        delay_topic=settings.kafka.delay_topic,
        max_body_bytes=settings.portal.max_body_bytes,
    )


VIEW_START_WAIT_S = 5.0
"""How long a start waits for the transaction log's live view to know where it starts in every
partition (its first fetches, about half a second) before it listens anyway."""
IO_THREADS = 64
"""Threads for the blocking calls that remain (token lookups, a transaction read from the log
itself): they must not queue behind each other in the default pool (cores + 4 threads)."""


def main(settings: Settings) -> int:
    return runtime.run("gateway", lambda: serve(settings), threads=IO_THREADS)


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> int:
    loop = asyncio.get_running_loop()
    gw = await asyncio.to_thread(build, settings)
    gw.producer.start(loop)
    await asyncio.to_thread(gw.idempotency.start, loop)
    if gw.transactions is not None:
        await asyncio.to_thread(gw.transactions.log.ensure)
        # Until the live view knows where it starts, every commit reads the log in a thread (~20 ms
        # and a reader each): a replica restarted under load would answer its first commits slowly.
        if not await asyncio.to_thread(gw.transactions.log.view_started, VIEW_START_WAIT_S):
            _log.warning("gateway.txn_view_not_started", wait_s=VIEW_START_WAIT_S, topic=gw.transactions.log.topic)
    # As the worker does: what start-up built stays out of every collection, and the young
    # generation is collected every 100,000 allocations, not every 700 (a full collection over a
    # busy gateway's objects was a request's whole latency budget).
    gc.freeze()
    gc.set_threshold(100_000, 10, 10)
    server = Server(
        create_handler(gw),
        max_body_bytes=gw.max_body_bytes,
        read_timeout_s=settings.gateway.read_timeout_ms / 1000,
        refusal=create_refusal(gw),
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        host = settings.gateway.host
        try:
            port = await server.start(host, settings.gateway.port)
        except OSError as exc:  # what was started above is closed below, as on a stop
            raise health.listen_refused(
                exc, "FERRY_GATEWAY_HOST", host, "FERRY_GATEWAY_PORT", settings.gateway.port
            ) from None
        url = f"http://{host}:{port}"
        native = {"_acks": gw.producer.native_acks, "_plain": records.NATIVE}
        _log.info("gateway.listening", host=host, port=port, url=url, native=native)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        await server.close()  # stops listening, lets requests in flight finish
        left = await asyncio.to_thread(gw.producer.close)
        await asyncio.to_thread(gw.idempotency.close)
        if gw.transactions is not None:
            gw.transactions.log.flush_committed()  # on the loop: it queues entries in the producer
            await asyncio.to_thread(gw.transactions.log.close)
        _log.info("gateway.stopped", unacknowledged=left)
    return 0
