"""Structured logging: one line per event, JSON (default) or ``key=value`` text.

Call ``log = get_logger(__name__)`` then ``log.info("partition.acquired", topic=..., partition=...)``.
The event name comes first and is stable (grep-able); fields follow. Values whose key looks
secret (token, password, authorization, headers, sasl...) are replaced by ``***`` before any
formatting, so a secret passed by mistake still never reaches the log.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

_SECRET_KEY = re.compile(r"(token|password|passwd|secret|authorization|headers|sasl|credential|api_?key)", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]*)@", re.I)


def is_secret_key(key: str) -> bool:
    """True for a setting or field name whose value is a secret (``sasl.password``, ``admin_token``...)."""
    return _SECRET_KEY.search(key) is not None


def redact(key: str, value: Any) -> Any:
    if _SECRET_KEY.search(key):
        return "***" if value not in (None, "", {}, []) else value
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", value)
    return value


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            **fields,
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(doc, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        kv = " ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in fields.items())
        base = f"{self.formatTime(record)} {record.levelname.lower():7} {record.name} {record.getMessage()} {kv}"
        if record.exc_info:
            base += " exc=" + json.dumps(self.formatException(record.exc_info).splitlines()[-1])
        return base.rstrip()


class Logger:
    """A thin structured front on :mod:`logging`."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(name)

    def _emit(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._log.isEnabledFor(level):
            clean = {k: redact(k, v) for k, v in fields.items()}
            self._log.log(level, event, extra={"fields": clean}, exc_info=exc_info)

    def is_enabled_for(self, level: int) -> bool:
        return self._log.isEnabledFor(level)

    def log(self, level: int, event: str, **fields: Any) -> None:
        """An event at a :mod:`logging` level given as a number (e.g. one mapped from another library's)."""
        self._emit(level, event, False, fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, False, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, False, fields)

    def error(self, event: str, exc_info: bool = False, **fields: Any) -> None:
        self._emit(logging.ERROR, event, exc_info, fields)


def get_logger(name: str) -> Logger:
    return Logger(name)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a line is emitted, not the one at set-up: a
    test runner swaps it and closes its replacement, and background threads (librdkafka's log
    poller) may still log after that."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def setup(level: str = "INFO", fmt: str = "json") -> None:
    handler = _StderrHandler()
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at WARNING: kazoo logs every connection state at INFO, httpx every
    # request (the demo producer's one a second, a client command's every call).
    for noisy in ("kazoo", "aiohttp.access", "alembic", "py4j", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
