"""Subscription filters: push only the records an endpoint wants (docs/filters.md).

Use case: a subscription's ``"filter"`` is a CloudEvents Subscriptions API filter — one of
``{"exact": {attr: value}}``, ``{"prefix": {...}}``, ``{"suffix": {...}}``, ``{"all": [f, ...]}``,
``{"any": [f, ...]}``, ``{"not": f}``, ``{"sql": "<CESQL>"}`` (:mod:`ferry.filters.cesql`).
:func:`parse` validates a filter document once (a bad one raises
:class:`ferry.errors.ValidationError` with its dotted ``field``, e.g. ``filter.all[1].sql``) and
compiles it into a :class:`Filter`, whose :meth:`Filter.matches` judges one record's attributes
(the worker runs a fetch through :mod:`ferry.filters.splitter`, with the same verdicts, before its
records enter the partition's window). Pure: no I/O.

Attributes are those of the push (docs/contract.md §4, without ``ce-``: ``id``, ``source``,
``type``, ``time``, ``kafkatopic``, ``kafkapartition``, ``kafkaoffset``, ``partitionkey``,
``ferryattempt``, ``datacontenttype``) plus every record header whose lowercased name is a valid
attribute name (``[a-z0-9]{1,20}``). A dialect filter on an attribute the record lacks is false; a
CESQL evaluation error makes the filter false and is counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ferry.errors import ValidationError
from ferry.filters import cesql
from ferry.filters.attributes import RecordAttributes, reader

ATTRIBUTE_NAME = re.compile(r"[a-z0-9]{1,20}")
MAX_DEPTH = 16
MAX_SQL = 4096

Attributes = Mapping[str, Any]
Match = Callable[[Attributes], tuple[bool, bool]]  # → (passes, erred)


@dataclass(frozen=True)
class Filter:
    """A compiled filter; ``document`` is what was registered, ``attributes`` the names it reads
    (``None``: every header may matter, e.g. ``EXISTS`` on any name)."""

    document: Any
    matches: Match
    attributes: frozenset[str] | None


def parse(doc: Any, path: str = "filter", *, stored: bool = False) -> Filter:
    """The compiled filter of ``doc``, or :class:`ValidationError` naming the part that is wrong.

    ``stored``: ``doc`` is a filter Ferry saved earlier (a worker's subscription, the database),
    possibly by an earlier version: the checks added since are not applied, so it keeps loading and
    judging records as before — it may nest 17 levels (16 before a combinator stopped counting from
    0), and its CESQL is not held to :func:`ferry.filters.cesql.check_filter` (that was only the
    unknown function).
    """
    used: set[str] = set()
    match = _parse(doc, path, used, 1, stored)
    return Filter(doc, match, frozenset(used))


def _too_deep(path: str) -> ValidationError:
    return ValidationError(
        path,
        f'filters nest at most {MAX_DEPTH} levels deep ({{"exact": ...}} alone is 1; each all, any or not '
        f"around it adds 1) and this part is at level {MAX_DEPTH + 1}: merge nested all or any lists, "
        "drop double nots, or write the condition as one sql filter",
    )


def _height(doc: Any) -> int:
    """How many levels ``doc`` nests (1 for a leaf or anything malformed), without recursion."""
    height = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, level = stack.pop()
        height = max(height, level)
        if isinstance(node, dict) and len(node) == 1:
            ((dialect, arg),) = node.items()
            if dialect in ("all", "any") and isinstance(arg, list):
                stack.extend((child, level + 1) for child in arg)
            elif dialect == "not":
                stack.append((arg, level + 1))
    return height


def _parse(doc: Any, path: str, used: set[str], depth: int, stored: bool) -> Match:
    """``doc`` at level ``depth`` (the whole filter is level 1)."""
    deepest = MAX_DEPTH + 1 if stored else MAX_DEPTH
    if not isinstance(doc, dict) or len(doc) != 1:
        raise ValidationError(
            path, "must be an object with exactly one dialect: exact, prefix, suffix, all, any, not or sql"
        )
    ((dialect, arg),) = doc.items()
    here = f"{path}.{dialect}"
    if dialect in ("exact", "prefix", "suffix"):
        if not isinstance(arg, dict) or len(arg) != 1:
            raise ValidationError(here, 'must be an object with exactly one attribute, e.g. {"type": "order.created"}')
        ((name, value),) = arg.items()
        if not ATTRIBUTE_NAME.fullmatch(name):
            raise ValidationError(f"{here}.{name}", "attribute names are 1-20 characters of a-z and 0-9")
        if not isinstance(value, str):
            raise ValidationError(f"{here}.{name}", "must be a string")
        used.add(name)
        return _string_test(dialect, name, value)
    if dialect in ("all", "any"):
        if not isinstance(arg, list) or not arg:
            raise ValidationError(here, "must be a non-empty list of filters")
        if depth >= deepest:  # its parts would be past the limit: name the one on the deepest branch
            heights = [_height(f) for f in arg]
            raise _too_deep(f"{here}[{heights.index(max(heights))}]")
        parts = [_parse(f, f"{here}[{i}]", used, depth + 1, stored) for i, f in enumerate(arg)]
        return _all(parts) if dialect == "all" else _any(parts)
    if dialect == "not":
        if depth >= deepest:
            raise _too_deep(here)
        inner = _parse(arg, here, used, depth + 1, stored)

        def negated(a: Attributes) -> tuple[bool, bool]:
            ok, erred = inner(a)
            return (False, True) if erred else (not ok, False)

        return negated
    if dialect == "sql":
        if not isinstance(arg, str) or not arg.strip():
            raise ValidationError(here, "must be a CESQL expression (a non-empty string)")
        if len(arg) > MAX_SQL:
            raise ValidationError(
                here, f"at most {MAX_SQL} characters, got {len(arg)}: split it into sql filters under all or any"
            )
        try:
            expr = cesql.compile(arg)
            if not stored:
                cesql.check_filter(expr)
        except cesql.CesqlParseError as exc:
            raise ValidationError(here, str(exc)) from None
        used.update(re.findall(r"[a-z0-9]{1,20}", arg.lower()))  # a superset of the names it reads
        return expr.matches
    raise ValidationError(path, f"unknown dialect {dialect!r}; use exact, prefix, suffix, all, any, not or sql")


def _string_test(dialect: str, name: str, value: str) -> Match:
    read = reader(name)  # the worker's record view, without a lookup by name per record

    def exact(a: Attributes) -> tuple[bool, bool]:
        v = read(a) if a.__class__ is RecordAttributes else a.get(name)
        return (v is not None and str(v) == value), False

    def prefix(a: Attributes) -> tuple[bool, bool]:
        v = read(a) if a.__class__ is RecordAttributes else a.get(name)
        return (v is not None and str(v).startswith(value)), False

    def suffix(a: Attributes) -> tuple[bool, bool]:
        v = read(a) if a.__class__ is RecordAttributes else a.get(name)
        return (v is not None and str(v).endswith(value)), False

    return {"exact": exact, "prefix": prefix, "suffix": suffix}[dialect]


def _all(parts: list[Match]) -> Match:
    def match(a: Attributes) -> tuple[bool, bool]:
        for p in parts:
            ok, erred = p(a)
            if erred:
                return False, True
            if not ok:
                return False, False
        return True, False

    return match


def _any(parts: list[Match]) -> Match:
    def match(a: Attributes) -> tuple[bool, bool]:
        erred_any = False
        for p in parts:
            ok, erred = p(a)
            if ok:
                return True, False
            erred_any = erred_any or erred
        return False, erred_any

    return match
