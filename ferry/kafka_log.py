"""librdkafka's own log lines, routed into Ferry's structured log.

Without help, librdkafka (under confluent-kafka) writes its log straight to stderr in its own
format (``%3|1795421877.537|FAIL|rdkafka#producer-101| [thrd:...]: ... Connection refused``),
one line per reconnect attempt: a worker whose broker was down wrote 24,679 of them in five
minutes. Every client Ferry creates is made by :mod:`ferry.kafka` (``consumer``, ``producer``,
``admin``), which gives it a :class:`ClientLog` as confluent-kafka's ``logger``. Each librdkafka
line then becomes one ``kafka.client_log`` event:

    {"level": "error", "logger": "ferry.kafka", "event": "kafka.client_log", "client":
     "rdkafka#consumer-3", "role": "fetch", "facility": "FAIL", "thread": "127.0.0.1:9092/bootstrap",
     "message": "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused
     (after 0ms in state CONNECT)", "suppressed": 198}

- Levels: confluent-kafka maps librdkafka's syslog levels to :mod:`logging` ones before they get
  here (0-2 critical, 3 error, 4 warning, 5-6 info, 7 debug); they are kept as they come.
- Repeats: one :class:`RepeatLimiter` per process lets through one line per (client, facility,
  message with its numbers blanked) every :data:`REPEAT_INTERVAL_S`; the next one let through
  carries ``suppressed``, how many were dropped in between. Debug lines (only there when the
  operator set librdkafka's ``debug`` contexts) are never collapsed: whoever asked wants them all.
- Secrets: librdkafka logs no password at its default levels; still, the values of the client's
  secret settings (``sasl.password``, ``ssl.key.password``...) are blanked out of every line, and
  the fields go through :func:`ferry.log.redact` like any other event's.

How confluent-kafka hands the lines over: with ``logger`` set, it turns librdkafka's
``log.queue`` on and forwards the log queue to the client's main queue, so lines reach
``logger.log()`` only in the Python thread that serves that queue: ``poll()``, ``consume()`` or
``flush()`` of a consumer or producer, ``poll()`` of an admin client. A client nobody polls keeps
its lines queued, in memory, about 20 a second while a broker refuses connections: clients kept
open between uses are polled by :data:`IDLE` (:class:`IdlePoller`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Protocol

from ferry import log

EVENT = "kafka.client_log"
REPEAT_INTERVAL_S = 10.0
"""At most one line per repeat key this often; the next one says how many were suppressed."""
REPEAT_KEYS_MAX = 1024
"""Repeat keys remembered at once (least recently let through forgotten first): bounded memory."""

_log = log.get_logger("ferry.kafka")
_THREAD = re.compile(r"\[thrd:(?P<thread>[^\]]*)\]:\s*")
_NUMBER = re.compile(r"\d+")
# Secret-looking settings whose names ferry.log's pattern misses.
_SECRET_SETTINGS = frozenset({"ssl.key.pem", "ssl_key"})
_SECRET_MIN_LEN = 4  # shorter values would blank out ordinary words


class RepeatLimiter:
    """Lets through the first event of a key, then at most one per ``interval_s``.

    :meth:`admit` returns None for an event to drop, else how many events of its key were dropped
    since the previous one let through. Not thread-safe (callers hold a lock); the clock is
    injected for tests. At most ``max_keys`` keys are kept: the least recently let through is
    forgotten first (its count of dropped events with it).
    """

    def __init__(
        self,
        interval_s: float = REPEAT_INTERVAL_S,
        max_keys: int = REPEAT_KEYS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[Hashable, list[float | int]] = OrderedDict()  # key -> [last let through, dropped]

    def __len__(self) -> int:
        return len(self._keys)

    def admit(self, key: Hashable) -> int | None:
        now = self._clock()
        entry = self._keys.get(key)
        if entry is None:
            self._keys[key] = [now, 0]
            if len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
            return 0
        if now - entry[0] < self.interval_s:
            entry[1] += 1
            return None
        dropped = int(entry[1])
        entry[0], entry[1] = now, 0
        self._keys.move_to_end(key)
        return dropped


def repeat_key(client: str, facility: str, message: str) -> tuple[str, str, str]:
    """Lines differing only in numbers (ports, durations, ids) repeat each other."""
    return client, facility, _NUMBER.sub("#", message)


def secret_values(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The values of a client configuration's secret settings, longest first."""
    found = {
        str(v)
        for k, v in config.items()
        if (log.is_secret_key(k) or k in _SECRET_SETTINGS) and isinstance(v, str) and len(v) >= _SECRET_MIN_LEN
    }
    return tuple(sorted(found, key=len, reverse=True))


_LIMITER = RepeatLimiter()
_LIMITER_LOCK = threading.Lock()  # lines come from whichever thread polls a client


class ClientLog:
    """The ``logger`` confluent-kafka is given for one client. It calls
    ``log(level, "%s [%s] %s", facility, client_name, message)`` from the thread polling the
    client; whatever goes wrong here is swallowed, as an exception would be raised from that
    ``poll()``."""

    def __init__(
        self,
        role: str,
        config: Mapping[str, Any] | None = None,
        limiter: RepeatLimiter | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.role = role
        self._secrets = secret_values(config or {})
        self._limiter = _LIMITER if limiter is None else limiter
        self._lock = _LIMITER_LOCK if lock is None else lock

    def log(self, level: int, msg: str, *args: Any, **_kwargs: Any) -> None:
        with contextlib.suppress(Exception):
            self._log(level, msg, args)

    def _log(self, level: int, msg: str, args: tuple[Any, ...]) -> None:
        if not _log.is_enabled_for(level):
            return
        if len(args) == 3:
            facility, client, message = (str(a) for a in args)
        else:
            facility, client, message = "", "", (msg % args if args else str(msg))
        thread = ""
        m = _THREAD.match(message)
        if m is not None:
            thread, message = m["thread"], message[m.end() :]
        for secret in self._secrets:
            message = message.replace(secret, "***")
            thread = thread.replace(secret, "***")
        fields: dict[str, Any] = {"client": client, "role": self.role, "facility": facility}
        if thread:
            fields["thread"] = thread
        fields["message"] = message
        if level > logging.DEBUG:
            with self._lock:
                suppressed = self._limiter.admit(repeat_key(client, facility, message))
            if suppressed is None:
                return
            if suppressed:
                fields["suppressed"] = suppressed
        _log.log(level, EVENT, **fields)


class Pollable(Protocol):
    def poll(self, timeout: float = ...) -> Any: ...


class IdlePoller:
    """Polls clients that are kept open between uses, so their queued log lines are handed over
    (and their memory freed) while nobody else polls them.

    Only for clients that are idle between uses: no subscription, and no assignment outside a
    :meth:`busy` block (a poll here would take records meant for the owner). The owner wraps each
    use in ``with IDLE.busy(client):`` and calls :meth:`forget` before closing the client. The
    polling thread starts with the first :meth:`watch`; each round is :meth:`serve_once`.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._clients: dict[int, tuple[Pollable, threading.RLock]] = {}
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, client: Pollable) -> None:
        with self._guard:
            self._clients.setdefault(id(client), (client, threading.RLock()))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ferry-kafka-idle-logs", daemon=True)
                self._thread.start()

    def forget(self, client: Pollable) -> None:
        """Stop polling ``client`` (waits for a poll under way): call before closing it."""
        with self._guard:
            entry = self._clients.pop(id(client), None)
        if entry is not None:
            with entry[1]:
                pass

    def forget_all(self) -> None:
        """Stop polling every client (a test session ending with clients its tests left open)."""
        with self._guard:
            entries = list(self._clients.values())
            self._clients.clear()
        for _, lock in entries:
            with lock:
                pass

    def watching(self, client: Pollable) -> bool:
        with self._guard:
            return id(client) in self._clients

    @contextlib.contextmanager
    def busy(self, client: Pollable) -> Iterator[None]:
        """The owner uses ``client``: no poll from here meanwhile."""
        with self._guard:
            entry = self._clients.get(id(client))
        if entry is None:
            yield
            return
        with entry[1]:
            yield

    def serve_once(self) -> int:
        """Poll every watched client not busy; returns how many were polled."""
        with self._guard:
            entries = list(self._clients.values())
        served = 0
        for client, lock in entries:
            if not lock.acquire(blocking=False):
                continue  # its owner is using it, and serving its queue meanwhile
            try:
                if self.watching(client):
                    client.poll(0)
                    served += 1
            except Exception:
                # Closed behind our back (RuntimeError) or broken: nothing more to serve.
                with self._guard:
                    self._clients.pop(id(client), None)
            finally:
                lock.release()
        return served

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            self.serve_once()


IDLE = IdlePoller()
"""The process's :class:`IdlePoller`."""
