"""The demo echo endpoint: acknowledges pushes, counts them and shows the newest first."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from ferry.devstack import demo


async def test_echo_acknowledges_counts_and_shows_newest_first() -> None:
    async with TestClient(TestServer(demo.echo_app())) as client:
        empty = await (await client.get("/")).json()
        assert empty == {"received": 0, "last": []}
        for offset, key in enumerate(["customer-1", "customer-2"]):
            r = await client.post(
                "/hook",
                data=b'{"order_id": %d}' % offset,
                headers={"ce-id": f"demo.orders/0/{offset}", "ce-partitionkey": key, "ce-ferryattempt": "1"},
            )
            assert r.status == 200
        shown = await (await client.get("/")).json()
        assert shown["received"] == 2
        assert [x["id"] for x in shown["last"]] == ["demo.orders/0/1", "demo.orders/0/0"]
        assert shown["last"][0]["key"] == "customer-2"
        assert shown["last"][0]["body"] == '{"order_id": 1}'


async def test_echo_keeps_a_bounded_history() -> None:
    async with TestClient(TestServer(demo.echo_app())) as client:
        for i in range(60):
            assert (await client.post("/hook", data=str(i).encode())).status == 200
        shown = await (await client.get("/")).json()
        assert shown["received"] == 60
        assert len(shown["last"]) == 50
        assert shown["last"][0]["body"] == "59"
