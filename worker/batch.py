"""Batch push mode, the pure half: records → one CloudEvents batch body; an answer → per-record outcomes.

Use case: a subscription with ``batch`` set pushes up to ``max_records`` records (or
``max_bytes``) per POST as a JSON array of CloudEvents in structured mode, Content-Type
``application/cloudevents-batch+json`` (docs/delivery.md, "Batch push mode"). Nothing here does
I/O or reads a clock except the event ``time`` formatting; :mod:`worker.batch_delivery` drives it.

Encoding is hand-written for speed (it runs for every record): constant attributes are escaped
once per subscription, timestamps are formatted once per second, keys and content types are
cached. A value whose content type is JSON and that parses as strict JSON is embedded verbatim as
``data``; any other value goes byte for byte as ``data_base64``; a null value has no data.
:func:`encode_batch` runs the C twin of :meth:`EventEncoder.events` (worker/_encode.c) when it was
built (:mod:`worker.native`); this Python loop is the reference and the fallback.

Answer interpretation (:func:`interpret` then :func:`settle`):

- 2xx whose body is a JSON object with ``results`` → per-record statuses (validated; a malformed
  ``results`` makes the whole batch retryable); any other 2xx → every record acknowledged;
- 413, or another non-retryable status for a batch of several records → split in halves;
- anything else → that status (or the transport error) applies to every record.

:func:`settle` turns per-record statuses into decisions with the retry policy; a record behind a
record of its own lane that will be retried is *held*: pushed again after it, never counted done
before it (at-least-once: it may be delivered twice, never out of order).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, cast
from urllib.parse import quote

import orjson

from ferry.worker import native
from ferry.worker.push import CE_TYPE, DEFAULT_CONTENT_TYPE, Record, _header_value, utc_second
from ferry.worker.retry import Decision, RetryPolicy

# Answer bodies are read up to this size; a longer one cannot be trusted as per-record results.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# CloudEvents attribute names: lower-case ASCII letters and digits, at most 20 characters.
CE_ATTR_RE = re.compile(r"[a-z0-9]{1,20}")
RESERVED_ATTRS = frozenset(
    {
        "specversion",
        "id",
        "source",
        "type",
        "time",
        "datacontenttype",
        "dataschema",
        "subject",
        "data",
        "data_base64",
        "kafkatopic",
        "kafkapartition",
        "kafkaoffset",
        "partitionkey",
        "ferryattempt",
        "ferryheaders",
    }
)
_JSON_TYPE_RE = re.compile(r"^(application|text)/([a-z0-9.!#$&^_-]+\+)?json\s*(;.*)?$", re.IGNORECASE)
# Per-event bytes beyond key and value, for the max_bytes estimate taken before encoding.
EVENT_OVERHEAD = 320
_MILLIS = tuple(f"{ms:03d}Z" for ms in range(1000))


def event_size(record: Record) -> int:
    """Estimated encoded size of one event (base64 makes a non-JSON value 4/3 as large)."""
    return len(record.value or b"") * 4 // 3 + len(record.key or b"") * 3 + EVENT_OVERHEAD


def is_json(value: bytes) -> bool:
    """Strict JSON text in UTF-8 (RFC 8259: no NaN/Infinity, no lone surrogates), safe to embed verbatim."""
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def _orjson_max_depth() -> int:
    """orjson's nesting limit (1024 since 3.9.15, none before: -1), so the C check gives its verdicts."""

    def nested(depth: int) -> bytes:
        return b"[" * depth + b"]" * depth

    if is_json(nested(4096)):
        return -1
    accepted, rejected = 1, 4096
    while rejected - accepted > 1:
        mid = (accepted + rejected) // 2
        if is_json(nested(mid)):
            accepted = mid
        else:
            rejected = mid
    return accepted


_native = native.load("_encode")
_JSON_MAX_DEPTH = _orjson_max_depth() if _native is not None else -1


class EventEncoder:
    """Builds the body of a batch for one subscription; caches are bounded."""

    _CACHE_MAX = 4096

    def __init__(self, cluster: str, subscription: str, kafka_cluster: str = "default") -> None:
        self._head = '{"specversion":"1.0","type":' + json.dumps(CE_TYPE) + ',"source":'
        self._head += json.dumps(f"/ferry/{cluster}/{subscription}")
        if kafka_cluster != "default":
            # Records of another Kafka cluster say which: ids are unique per cluster (docs/zones.md).
            self._head += ',"kafkacluster":' + json.dumps(kafka_cluster)
        self._head += ',"id":"'
        self._second: int | None = None
        self._second_text = ""
        self._keys: dict[bytes, str] = {}
        self._types: dict[bytes | None, tuple[str, bool]] = {}
        # (topic, partition) -> the id prefix and the kafka* attributes up to the offset.
        self._where: dict[tuple[str, int], tuple[str, str]] = {}
        # Records of a topic mostly carry the same few header sets (content-type, schema, ...).
        self._header_sets: dict[tuple[tuple[str, bytes | None], ...], tuple[str, bool, str]] = {}

    def _second_of(self, ms: int) -> tuple[int, str]:
        """(the second of ``ms``, formatted up to the seconds); formatted once per second."""
        second = ms // 1000
        if second != self._second:
            self._second = second
            self._second_text = utc_second(second)
        return second, self._second_text

    def _content_type(self, raw: bytes | None) -> tuple[str, bool]:
        """(the escaped ``datacontenttype`` value, whether it names JSON)."""
        found = self._types.get(raw)
        if found is None:
            text = _header_value(raw) if raw else DEFAULT_CONTENT_TYPE
            found = (json.dumps(text), bool(_JSON_TYPE_RE.match(text)))
            if len(self._types) >= self._CACHE_MAX:
                self._types.clear()
            self._types[raw] = found
        return found

    def _key(self, key: bytes) -> str:
        """The ``partitionkey`` attribute of a key, with its leading comma."""
        text = self._keys.get(key)
        if text is None:
            text = f',"partitionkey":"{quote(key, safe="")}"'
            if len(self._keys) >= self._CACHE_MAX:
                self._keys.clear()
            self._keys[key] = text
        return text

    def _header_set(self, headers: tuple[tuple[str, bytes | None], ...]) -> tuple[str, bool, str]:
        """(escaped ``datacontenttype``, whether it names JSON, the other headers as attributes)."""
        found = self._header_sets.get(headers)
        if found is None:
            content_type, extra = self._headers(headers)
            found = (*self._content_type(content_type), extra)
            if len(self._header_sets) >= self._CACHE_MAX:
                self._header_sets.clear()
            self._header_sets[headers] = found
        return found

    def event(self, r: Record, attempt: int) -> str:
        """One structured-mode CloudEvent as JSON text."""
        return self.events([r], [attempt])[0]

    def events(self, records: Sequence[Record], attempts: Sequence[int]) -> list[str]:
        """The structured-mode CloudEvents of a batch, as JSON texts, in the order given.

        One loop with everything it needs in locals: this runs for every record pushed in batch
        mode (bench/batch.py profile), so each record costs a few dictionary lookups, a JSON check
        of its value and one f-string.
        """
        out: list[str] = []
        append = out.append
        header_sets, keys, loads, decode_error = self._header_sets, self._keys, orjson.loads, orjson.JSONDecodeError
        plain = (*self._content_type(None), "")
        topic: str | None = None
        partition = -1
        id_head = kafka_attrs = ""
        # Records of a topic share one headers tuple (worker/fetch.py): an identity check saves
        # hashing it per record.
        last_headers: object = None
        ctype, json_type, extra = plain
        second, second_text = self._second, self._second_text
        for r, attempt in zip(records, attempts, strict=True):
            headers = r.headers
            if headers is not last_headers:
                last_headers = headers
                if headers:
                    hkey = tuple(headers)
                    ctype, json_type, extra = header_sets.get(hkey) or self._header_set(hkey)
                else:
                    ctype, json_type, extra = plain
            if r.partition != partition or r.topic != topic:
                topic, partition = r.topic, r.partition
                id_head, kafka_attrs = self._where_of(topic, partition)
            ms = r.timestamp_ms
            if ms // 1000 != second:
                second, second_text = self._second_of(ms)
            key = r.key
            key_attr = "" if key is None else (keys.get(key) or self._key(key))
            value = r.value
            offset = r.offset
            if value is None:
                data = ""
            elif json_type:
                try:
                    loads(value)
                    data = ',"data":' + value.decode()  # valid UTF-8: orjson checked it
                except decode_error:
                    data = ',"data_base64":"' + base64.b64encode(value).decode() + '"'
            else:
                data = ',"data_base64":"' + base64.b64encode(value).decode() + '"'
            append(
                f'{id_head}{offset}","time":"{second_text}{_MILLIS[ms % 1000]}","datacontenttype":{ctype}'
                f'{kafka_attrs}{offset},"ferryattempt":{attempt}{key_attr}{extra}{data}}}'
            )
        return out

    def _where_of(self, topic: str, partition: int) -> tuple[str, str]:
        """(the event's head up to its id's offset, the kafka* attributes up to the offset)."""
        where = self._where.get((topic, partition))
        if where is None:
            if len(self._where) >= self._CACHE_MAX:
                self._where.clear()
            where = self._where[(topic, partition)] = (
                f"{self._head}{topic}/{partition}/",
                f',"kafkatopic":"{topic}","kafkapartition":{partition},"kafkaoffset":',
            )
        return where

    @staticmethod
    def _headers(headers: Sequence[tuple[str, bytes | None]]) -> tuple[bytes | None, str]:
        """(the content-type header, the extension attributes for the other headers)."""
        content_type: bytes | None = None
        attrs: list[str] = []
        seen: set[str] = set()
        rest: list[str] = []
        for name, value in headers:
            if value is None:
                continue
            lower = name.lower()
            if lower == "content-type" and content_type is None:
                content_type = value
            elif CE_ATTR_RE.fullmatch(lower) and lower not in RESERVED_ATTRS and lower not in seen:
                seen.add(lower)
                attrs.append(f',"{lower}":{json.dumps(_header_value(value))}')
            else:
                rest.append(f"{quote(name, safe='')}={quote(value, safe='')}")
        if rest:
            attrs.append(f',"ferryheaders":"{"&".join(rest)}"')
        return content_type, "".join(attrs)


def encode_batch(encoder: EventEncoder, records: Sequence[Record], attempts: Sequence[int]) -> bytes:
    """The batch body, a JSON array of events; the C twin gives the same bytes and leaves inputs
    of another shape (a value that is not ``bytes``, ...) to the Python loop."""
    if _native is not None:
        body = _native.encode_batch(encoder, records, attempts, _JSON_MAX_DEPTH)
        if body is not NotImplemented:
            return cast(bytes, body)
    return ("[" + ",".join(encoder.events(records, attempts)) + "]").encode()


def event_id(r: Record) -> str:
    return f"{r.topic}/{r.partition}/{r.offset}"


def distinct_id_runs(ids: Sequence[str]) -> list[tuple[int, int]]:
    """``ids`` cut into consecutive runs ``[start, end)`` in none of which an id repeats.

    A retry topic's events carry the id of where each record was first read, so two copies of one
    record (a dead letter redriven, dead-lettered again and redriven again) share an id: in one
    batch the endpoint's per-record ``results`` could not name each once, and a correct answer
    would read as malformed. Pushed run after run, in order, each batch's ids are unique."""
    runs: list[tuple[int, int]] = []
    start = 0
    seen: set[str] = set()
    for i, cid in enumerate(ids):
        if cid in seen:
            runs.append((start, i))
            start = i
            seen = set()
        seen.add(cid)
    runs.append((start, len(ids)))
    return runs


# --- answers ---------------------------------------------------------------------------------

Kind = Literal["statuses", "split", "malformed"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one answer says: per-record ``statuses`` (None: no answer), a ``split``, or ``malformed``."""

    kind: Kind
    statuses: tuple[int | None, ...] = ()
    reasons: tuple[str, ...] = ()
    """Per record: the transport error, the endpoint's ``error`` text, or why the answer is malformed."""


def _whole(n: int, status: int | None, reason: str) -> Verdict:
    return Verdict("statuses", (status,) * n, (reason,) * n)


def _results(doc: object, ids: Sequence[str]) -> Verdict | str:
    """Per-record statuses from ``{"results": [{"id", "status", "error"?}, ...]}``, or why not."""
    assert isinstance(doc, dict)
    results = doc["results"]
    if not isinstance(results, list):
        return "'results' must be an array"
    if len(results) != len(ids):
        return f"'results' has {len(results)} entries for {len(ids)} events"
    position = {cid: i for i, cid in enumerate(ids)}
    statuses: list[int | None] = [None] * len(ids)
    reasons = [""] * len(ids)
    for n, entry in enumerate(results):
        if not isinstance(entry, dict):
            return f"results[{n}] must be an object"
        i = position.get(entry.get("id"))  # type: ignore[arg-type]
        if i is None or statuses[i] is not None:
            return f"results[{n}].id {entry.get('id')!r} is not an event of this batch, or is repeated"
        status = entry.get("status")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            return f"results[{n}].status must be an HTTP status (100-599)"
        statuses[i] = status
        error = entry.get("error")
        reasons[i] = error[:200] if isinstance(error, str) else ""
    return Verdict("statuses", tuple(statuses), tuple(reasons))


def interpret(
    status: int | None, body: bytes, truncated: bool, ids: Sequence[str], error: str | None = None
) -> Verdict:
    """Read one answer to a batch of events with ``ids`` (array order)."""
    n = len(ids)
    if status is None:
        return _whole(n, None, error or "no answer")
    if 200 <= status < 300:
        stripped = body.lstrip()
        if not stripped.startswith(b"{"):
            return _whole(n, status, "")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            if truncated:
                return Verdict("malformed", reasons=(f"answer body over {MAX_ANSWER_BYTES} bytes",) * n)
            if b'"results"' in body:
                return Verdict("malformed", reasons=("per-record results that are not valid JSON",) * n)
            return _whole(n, status, "")  # not JSON: an irrelevant body
        if not isinstance(doc, dict) or "results" not in doc:
            return _whole(n, status, "")
        found = _results(doc, ids)
        if isinstance(found, str):
            return Verdict("malformed", reasons=(f"malformed per-record results: {found}",) * n)
        return found
    if n > 1 and (status == 413 or (400 <= status < 500 and status not in (408, 429))):
        return Verdict("split", (status,) * n, (f"endpoint answered {status} for the batch",) * n)
    return _whole(n, status, "")


Action = Literal["ack", "retry", "dead_letter", "held"]


@dataclass(frozen=True, slots=True)
class Settled:
    action: Action
    delay_s: float = 0.0
    reason: str = ""


ACK = Settled("ack")


def settle(
    verdict: Verdict,
    lanes: Sequence[Hashable],
    charged: Sequence[int],
    policy: RetryPolicy,
    retry_after_s: float | None = None,
) -> list[Settled]:
    """Per-record decisions for a ``statuses`` or ``malformed`` verdict.

    ``charged[i]`` is the record's failed-or-answered attempt count *including this push* (what
    the retry policy compares with ``max_attempts``). Records after a retried record of the same
    lane are held (not charged: their own answer did not fail them).
    """
    out: list[Settled] = []
    retrying: set[Hashable] = set()
    for i, lane in enumerate(lanes):
        if lane in retrying:
            out.append(Settled("held", reason="held behind an earlier record of its key"))
            continue
        if verdict.kind == "malformed":
            d: Decision = policy.after_error(charged[i], verdict.reasons[i])
        else:
            status = verdict.statuses[i]
            if status is not None and 200 <= status < 300:
                out.append(ACK)
                continue
            if status is None:
                d = policy.after_error(charged[i], verdict.reasons[i] or "no answer")
            else:
                d = policy.after_status(charged[i], status, retry_after_s)
                if verdict.reasons[i]:
                    d = Decision(d.action, d.delay_s, f"{d.reason} ({verdict.reasons[i]})")
        if d.action == "retry":
            retrying.add(lane)
        out.append(Settled(d.action, d.delay_s, d.reason))
    return out
