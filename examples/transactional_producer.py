"""A shop that stores an order in its own database and publishes "order placed" through Ferry's
transactional messages: the event reaches Kafka if and only if the order is committed locally.

    python3 examples/transactional_producer.py --gateway http://127.0.0.1:8081 --token "$TOKEN"
    curl -s -X POST localhost:8090/orders -d '{"customer": "c-42", "amount": 25.5}'

Each order takes the three steps of docs/transactions.md:

1. prepare the event at the gateway (stored, invisible), naming this service's ``/ferry/check``;
2. in one local SQL transaction, insert the order and the transaction's id;
3. commit the event if the local transaction committed, else roll it back.

If the shop dies between 1 and 3, Ferry asks ``/ferry/check`` once ``--timeout-ms`` has passed.
The transaction's id is in the database exactly when the order is, so the answer is ``commit``
when the id is found and ``rollback`` when it is not (a local transaction here lasts milliseconds,
far less than the timeout, so one that is not committed by then never will be). A database that
cannot answer makes the check ``unknown``: Ferry asks again later.

``--die-after prepare`` or ``--die-after local-commit`` ends the process at that point of the next
order, so that you can restart the shop and watch the back-check finish the work: the order
without its row is rolled back, the one with it committed.

Needs only what Ferry installs (aiohttp, httpx) and Python's sqlite3.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import uuid
from typing import Any

import httpx
from aiohttp import web

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    amount REAL NOT NULL CHECK (amount > 0)
);
CREATE TABLE IF NOT EXISTS ferry_transactions (
    id TEXT PRIMARY KEY,
    order_id TEXT NOT NULL REFERENCES orders (id)
);
"""


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), file=sys.stderr, flush=True)


class Shop:
    def __init__(self, args: argparse.Namespace) -> None:
        self.db = sqlite3.connect(args.db, isolation_level=None)  # transactions as written below
        self.db.executescript(SCHEMA)
        self.topic = args.topic
        self.check_url = f"{args.public_url or f'http://{args.host}:{args.port}'}/ferry/check"
        self.timeout_ms = args.timeout_ms
        self.die_after = args.die_after
        self.gateway = httpx.AsyncClient(
            base_url=args.gateway, headers={"Authorization": f"Bearer {args.token}"}, timeout=30
        )

    async def place_order(self, request: web.Request) -> web.Response:
        try:
            order = await request.json()
        except ValueError:
            order = None
        amount = order.get("amount") if isinstance(order, dict) else None
        customer = order.get("customer") if isinstance(order, dict) else None
        if not isinstance(amount, int | float) or isinstance(amount, bool) or not isinstance(customer, str):
            return web.json_response({"error": 'send {"customer": "...", "amount": 12.5}'}, status=400)
        order_id = uuid.uuid4().hex
        event = {"topic": self.topic, "key": order_id, "value": {"order": order_id, **order}}

        # 1. Prepare: durable at the gateway, invisible to consumers.
        prepared = await self.gateway.post(
            "/api/v1/transactions",
            json={"records": [event], "check_url": self.check_url, "timeout_ms": self.timeout_ms},
        )
        if prepared.status_code != 201:
            return web.json_response({"error": f"the gateway refused the event: {prepared.text}"}, status=502)
        txn = prepared.json()["id"]
        self.maybe_die("prepare", txn)

        # 2. The local transaction: the order and the transaction's id, together or not at all.
        try:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO orders (id, customer, amount) VALUES (?, ?, ?)",
                (order_id, customer, amount),
            )
            self.db.execute("INSERT INTO ferry_transactions (id, order_id) VALUES (?, ?)", (txn, order_id))
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            # 3a. Rolled back locally: the event must never appear.
            await self.gateway.post(f"/api/v1/transactions/{txn}/rollback")
            return web.json_response({"error": f"order refused: {exc}", "transaction": txn}, status=422)
        self.maybe_die("local-commit", txn)

        # 3b. Committed locally: publish the event. Should this fail, the order is stored and its
        # transaction's id with it, so the back-check will commit the event.
        committed = await self.gateway.post(f"/api/v1/transactions/{txn}/commit")
        if committed.status_code != 200:
            return web.json_response({"order": order_id, "transaction": txn, "event": "pending"}, status=202)
        return web.json_response(
            {"order": order_id, "transaction": txn, "event": committed.json()["results"][0]}, status=201
        )

    async def check(self, request: web.Request) -> web.Response:
        """Ferry's back-check: is this transaction's local work committed?"""
        txn = request.headers.get("ferry-transaction-id", "")
        try:
            found = self.db.execute("SELECT 1 FROM ferry_transactions WHERE id = ?", (txn,)).fetchone()
        except sqlite3.Error as exc:
            say("shop.check_failed", transaction=txn, error=str(exc))
            return web.json_response({"state": "unknown"}, status=503)
        state = "commit" if found else "rollback"
        say("shop.checked", transaction=txn, state=state)
        return web.json_response({"state": state})

    def maybe_die(self, point: str, txn: str) -> None:
        if self.die_after == point:
            say("shop.dying", after=point, transaction=txn)
            os._exit(3)

    async def close(self, _app: web.Application) -> None:
        await self.gateway.aclose()
        self.db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gateway", default="http://127.0.0.1:8081", help="the Ferry gateway's base URL")
    ap.add_argument("--token", default=os.environ.get("FERRY_TOKEN", ""), help="a token with produce scope")
    ap.add_argument("--db", default="shop.sqlite", help="the shop's SQLite database file")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--public-url", help="how Ferry reaches this shop (default: http://HOST:PORT)")
    ap.add_argument("--timeout-ms", type=int, default=60_000, help="how long before Ferry checks back")
    ap.add_argument("--die-after", choices=["prepare", "local-commit"], help="end the process there, once")
    args = ap.parse_args()
    shop = Shop(args)
    app = web.Application()
    app.router.add_post("/orders", shop.place_order)
    app.router.add_post("/ferry/check", shop.check)
    app.on_cleanup.append(shop.close)
    say("shop.listening", url=f"http://{args.host}:{args.port}", check_url=shop.check_url)
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
