"""One request's acknowledgements from librdkafka, collected for the event loop.

Use case: :class:`ferry.gateway.producer.Producer` queues a request's records with a delivery
callback each; librdkafka's callbacks arrive on the producer's poll thread, one per record, and the
request is answered once all of them did. At 100 records per request this is the gateway's hottest
per-record path, and it runs in a second thread that must hold the GIL for every callback: what the
callback costs, the event loop waits for. So this module is a pure-Python reference with a C twin
(``gateway/_acks.c``, built by setup.py where a compiler exists; ``FERRY_NATIVE=0`` turns it off):
tests/unit/test_gateway_acks.py drives both through the same steps and requires the same state.

A :class:`Pending` is made with the request's record count and the producer's ``done`` list:

- :meth:`Pending.batch` / :meth:`Pending.callback` give each queued record its callback (record
  ``i``'s stores ``(err, partition, offset)`` in ``acks[i]``, as the message gives them: the
  offset is None for a write the broker had already taken when librdkafka retried it);
- :meth:`Pending.seal` is called once every record was offered to librdkafka, with how many it did
  not take (they will never be called back);
- the callback that settles the last record of a sealed request appends the request to ``done``;
  if the request was already settled when sealed, ``seal`` returns True and nothing is appended
  (the caller settles it);
- :meth:`Pending.placed`, once settled, writes the answer's results as JSON text when every record
  was written (the common request), without a dict per record;
- :func:`take` empties ``done`` and returns what it held, in order.

States of a request: open (``left`` counts records not yet settled, including those not yet
offered) → sealed → settled (``left`` 0: in ``done``, or reported by ``seal``). ``failed`` counts
acknowledgements that carry an error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import orjson

from ferry import native

_lock = threading.Lock()  # the reference's counters are shared by the loop and the poll thread


class Acks(Protocol):
    """What the producer uses of a request's acknowledgements (either implementation)."""

    acks: list[Any]
    fut: Any
    size: int
    left: int
    failed: int

    def batch(self, items: Sequence[tuple[Any, str, int]], start: int, stop: int) -> list[dict[str, Any]]: ...
    def callback(self, i: int) -> Callable[[Any, Any], None]: ...
    def seal(self, unqueued: int) -> bool: ...
    def placed(self) -> bytes | None: ...


class Pending:
    """The pure-Python reference (see the module's docstring)."""

    __slots__ = ("acks", "done", "failed", "fut", "left", "sealed", "size")

    def __init__(self, fut: Any, n: int, done: list[Any]) -> None:
        self.fut = fut
        self.acks: list[Any] = [None] * n
        self.done = done
        self.left = n
        self.failed = 0
        self.sealed = False
        self.size = 0

    def batch(self, items: Sequence[tuple[Any, str, int]], start: int, stop: int) -> list[dict[str, Any]]:
        """``produce_batch()``'s messages for ``items[start:stop]`` — (record, topic, size) each —
        with the record's value, key and callback."""
        if not 0 <= start <= stop <= len(self.acks):
            raise IndexError(f"records {start}:{stop} of a request of {len(self.acks)}")
        ack = self._ack
        return [
            {"value": rec.value, "key": rec.key, "callback": partial(ack, i)}
            for i, (rec, _, _) in enumerate(items[start:stop], start)
        ]

    def callback(self, i: int) -> Callable[[Any, Any], None]:
        """Record ``i``'s delivery callback."""
        if not 0 <= i < len(self.acks):
            raise IndexError(f"record {i} of a request of {len(self.acks)}")
        return partial(self._ack, i)

    def _ack(self, i: int, err: Any, msg: Any) -> None:
        self.acks[i] = (err, msg.partition(), msg.offset())
        with _lock:
            if err is not None:
                self.failed += 1
            self.left -= 1
            if self.left == 0 and self.sealed:
                self.done.append(self)

    def seal(self, unqueued: int) -> bool:
        with _lock:
            self.left -= unqueued
            self.sealed = True
            return self.left == 0

    def placed(self) -> bytes | None:
        """Where every record was written, as the JSON text of the answer's results
        (``[{"partition": p, "offset": o}, ...]``, an offset librdkafka did not learn as null),
        when every record was acknowledged without an error; None otherwise. The common request's
        answer, without a dict per record."""
        acks = self.acks
        if None in acks or any(ack[0] is not None for ack in acks):  # an error may be stored, not counted
            return None
        return orjson.dumps([{"partition": ack[1], "offset": ack[2]} for ack in acks])


def take(done: list[Any]) -> list[Any]:
    """Empty ``done``; what it held, in order."""
    with _lock:
        out = done[:]
        del done[:]
    return out


def implementation() -> tuple[Callable[[Any, int, list[Any]], Acks], Callable[[list[Any]], list[Any]]]:
    """``(Pending, take)``: the C twin's when it is built and ``FERRY_NATIVE`` is on, else this
    module's."""
    c = native.load("ferry.gateway._acks")
    if c is None:
        return Pending, take
    return c.Pending, c.take
