"""The gateway refuses an address that keeps sending wrong tokens (429), as the portal does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ferry.gateway import app
from ferry.gateway.httpmsg import Request
from ferry.gateway.tokens import Principal
from ferry.guessing import FailedLogins

SHOP = Principal("shop", "produce", ("orders",))


class Tokens:
    """``right`` is a valid token; the cache knows it once it was looked up."""

    def __init__(self) -> None:
        self.seen = False

    async def principal(self, token: str) -> Principal | None:
        self.seen = self.seen or token == "right"
        return SHOP if token == "right" else None

    def known(self, token: str) -> Principal | None:
        return SHOP if token == "right" and self.seen else None


def request(token: str, client: str) -> Request:
    r = Request(lambda _: None, client)
    r.headers = {"authorization": f"Bearer {token}"}
    return r


async def status(gw: SimpleNamespace, token: str, client: str = "127.0.0.9") -> int:
    try:
        await app._authenticate(gw, request(token, client))  # type: ignore[arg-type]
    except app.ApiError as exc:
        return exc.status
    return 200


async def test_wrong_tokens_block_the_address_for_a_while() -> None:
    gw = SimpleNamespace(logins=FailedLogins(limit=3, window_s=60, block_s=60), tokens=Tokens())
    assert [await status(gw, "guess") for _ in range(3)] == [401, 401, 401]
    with pytest.raises(app.ApiError) as blocked:
        await app._authenticate(gw, request("guess", "127.0.0.9"))  # type: ignore[arg-type]
    assert blocked.value.status == 429 and blocked.value.retry_after_s and blocked.value.retry_after_s > 0
    assert await status(gw, "right") == 429  # not looked up while blocked: a token holder cannot probe
    assert await status(gw, "right", client="127.0.0.10") == 200  # another address is not blocked ...
    assert await status(gw, "right") == 200  # ... and a token known right passes (clients behind one proxy)
    assert await status(gw, "guess") == 429


async def test_right_tokens_do_not_clear_the_count() -> None:
    gw = SimpleNamespace(logins=FailedLogins(limit=3, window_s=60, block_s=60), tokens=Tokens())
    assert [await status(gw, t) for t in ("guess", "guess", "right", "guess", "guess")] == [401, 401, 200, 401, 429]
