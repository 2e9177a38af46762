"""The ``ferry dev --demo`` extras: a built-in echo endpoint and a producer trickle.

``python -m ferry.devstack.demo echo --port P`` acknowledges every push and shows the last records at
``GET /`` (JSON); ``python -m ferry.devstack.demo produce --bootstrap B --topic T --rate R`` produces
realistic keyed JSON orders at R records/s until stopped.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
from collections import deque
from typing import Any

from aiohttp import web

from ferry import log
from ferry.clock import now_ms

_log = log.get_logger(__name__)
DEMO_TOPIC = "demo.orders"
DEMO_SUBSCRIPTION = "demo-orders"


def echo_app() -> web.Application:
    last: deque[dict[str, Any]] = deque(maxlen=50)
    counts = {"received": 0}

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        counts["received"] += 1
        last.append(
            {
                "id": request.headers.get("ce-id"),
                "key": request.headers.get("ce-partitionkey"),
                "attempt": request.headers.get("ce-ferryattempt"),
                "time": request.headers.get("ce-time"),
                "body": body[:500].decode("utf-8", "replace"),
            }
        )
        return web.Response(status=200)

    async def show(_: web.Request) -> web.Response:
        return web.json_response({"received": counts["received"], "last": list(last)[::-1]})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/", show)
    return app


def produce(gateway_url: str, token: str, topic: str, rate: float) -> None:
    """Orders at ``rate`` per second, written through the gateway (the produce half of Ferry), one
    small batch per second; a refused batch is logged and retried with the same Idempotency-Key."""
    import httpx

    client = httpx.Client(base_url=gateway_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    running = True

    def stop(*_: Any) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rng = random.Random()
    i = 0
    started = time.monotonic()
    run_id = f"{os.getpid()}-{int(time.time())}"
    while running:
        batch = []
        for _ in range(max(1, int(rate))):
            customer = f"customer-{rng.randrange(20)}"
            order = {
                "order_id": i,
                "customer": customer,
                "amount": round(rng.uniform(5, 500), 2),
                "ts": now_ms(),
            }
            batch.append({"key": customer, "value": order, "headers": {"content-type": "application/json"}})
            i += 1
        key = f"demo-{run_id}-{i}"
        while running:
            try:
                r = client.post(
                    f"/api/v1/topics/{topic}/records", json={"records": batch}, headers={"Idempotency-Key": key}
                )
                if r.status_code == 200:
                    break
                _log.warning("demo.produce_refused", status=r.status_code, answer=r.text[:200])
            except httpx.HTTPError as exc:
                _log.warning("demo.produce_failed", error=str(exc))
            time.sleep(1)
        time.sleep(max(0.0, started + i / rate - time.monotonic()))
    client.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m ferry.devstack.demo")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("echo")
    e.add_argument("--port", type=int, required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--gateway", required=True, help="the gateway's URL")
    pr.add_argument("--token", default=os.environ.get("FERRY_ADMIN_TOKEN", ""))
    pr.add_argument("--topic", default=DEMO_TOPIC)
    pr.add_argument("--rate", type=float, default=5.0)
    a = ap.parse_args()
    log.setup(os.environ.get("FERRY_LOG_LEVEL", "INFO"), os.environ.get("FERRY_LOG_FORMAT", "json"))
    if a.cmd == "echo":
        web.run_app(echo_app(), host="127.0.0.1", port=a.port, access_log=None, print=None)
    else:
        produce(a.gateway, a.token, a.topic, a.rate)


if __name__ == "__main__":
    main()
