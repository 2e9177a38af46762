"""Talking to the portal and the gateway: where they are, with which token, and one error type.

Use case: every client command builds a :class:`Client` from the saved login
(``$XDG_CONFIG_HOME/ferry/config.json``, written with mode 0600 by ``ferry login``) or the
environment (``FERRY_URL``, ``FERRY_TOKEN``, ``FERRY_GATEWAY_URL`` win over the file), and calls
:meth:`Client.call`, which answers the JSON body or raises :class:`ClientError` carrying the HTTP
status, the API's message and field, and the exit code the command ends with.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.errors import FerryError

# httpx's own command line (httpx._main) brings click, rich and pygments when they are installed:
# a tenth of a second of every `ferry` command, for a command Ferry never runs.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
import httpx  # noqa: E402

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_CONFLICT, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6


class ClientError(FerryError):
    def __init__(
        self, message: str, status: int | None = None, field: str | None = None, code: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self._code = code

    @property
    def exit_code(self) -> int:
        if self._code is not None:
            return self._code
        if self.status in (401, 403):
            return EXIT_AUTH
        if self.status == 404:
            return EXIT_NOT_FOUND
        if self.status in (409, 422):
            return EXIT_CONFLICT
        if self.status is None or self.status >= 500:
            return EXIT_UNAVAILABLE
        return EXIT_ERROR


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ferry" / "config.json"


@dataclass(frozen=True)
class Profile:
    url: str
    token: str
    gateway_url: str = ""

    @classmethod
    def load(cls) -> Profile:
        saved: dict[str, Any] = {}
        path = config_path()
        if path.exists():
            saved = json.loads(path.read_text())
        url = os.environ.get("FERRY_URL") or saved.get("url") or ""
        token = os.environ.get("FERRY_TOKEN") or saved.get("token") or ""
        gateway = os.environ.get("FERRY_GATEWAY_URL") or saved.get("gateway_url") or ""
        if not url or not token:
            raise ClientError(
                "not logged in: run `ferry login URL --token TOKEN` (or set FERRY_URL and FERRY_TOKEN)", code=EXIT_AUTH
            )
        return cls(url.rstrip("/"), token, gateway.rstrip("/"))

    def save(self) -> Path:
        path = config_path()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": self.url, "token": self.token, "gateway_url": self.gateway_url}, fh)
        os.chmod(path, 0o600)
        return path


class Client:
    def __init__(self, profile: Profile, timeout_s: float = 60.0) -> None:
        self.profile = profile
        self._http = httpx.Client(headers={"Authorization": f"Bearer {profile.token}"}, timeout=timeout_s)
        self.replayed = False
        """The last answer repeated an earlier request's (``Idempotent-Replayed: true``): nothing written."""

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        gateway: bool = False,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> Any:
        base = self.profile.gateway_url if gateway else self.profile.url
        if not base:
            raise ClientError(
                "no gateway URL: pass --gateway-url, set FERRY_GATEWAY_URL, or `ferry login --gateway-url`",
                code=EXIT_USAGE,
            )
        try:
            r = self._http.request(
                method,
                base + path,
                json=body,
                params={k: v for k, v in params.items() if v is not None},
                headers=headers,
            )
        except httpx.HTTPError as exc:
            raise ClientError(f"{base} did not answer: {exc}") from None
        try:
            doc = r.json()
        except ValueError:
            doc = None
        if r.status_code >= 400:
            message = doc.get("error") or doc.get("message") if isinstance(doc, dict) else None
            field = doc.get("field") if isinstance(doc, dict) else None
            raise ClientError(f"HTTP {r.status_code}: {message or r.text[:200]}", r.status_code, field)
        self.replayed = r.headers.get("idempotent-replayed") == "true"
        return doc

    def close(self) -> None:
        self._http.close()
