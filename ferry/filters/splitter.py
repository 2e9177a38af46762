"""A filter compiled for the records of one partition: one generated loop that splits a fetch into
the records the endpoint gets and those it does not, with the verdicts :meth:`Filter.matches
<ferry.filters.Filter.matches>` gives on each record's attributes (docs/filters.md, "Cost").

Use case: the worker's partition runner asks :func:`splitter` once per partition (and again when
the subscription's filter changes) and calls the result on every fetch::

    split = splitter(f, "orders", 3, "default", "billing", Layout(offset=2, key=3, headers=5, timestamp=6))
    admitted, rejected, errors = split(records)

Per record, that costs less than building a record view and calling ``matches``:

- the attributes a partition's records share (:data:`~ferry.filters.attributes.PER_PARTITION`:
  ``kafkatopic``, ``kafkapartition``, ``source``, ``type``, ...) are literals, so clauses on them
  are decided when the loop is compiled;
- header attributes, and the parts of the filter that read nothing else, are evaluated once per
  headers tuple, not per record: the fetch gives records with the same headers one shared tuple,
  so a run of them costs one identity check each (``region = 'eu'`` is then one variable);
- the other attributes (``partitionkey``, ``id``, ``kafkaoffset``, ``time``) are read from the
  record's fields in place, with no view or tuple per record, and a key's ``partitionkey`` text
  is remembered (keys recur);
- a fetch whose records all pass comes back as it is, nothing copied.

A record is a tuple; :class:`Layout` says where its fields are. Documents the loop does not cover
get ``None`` (the caller calls ``matches`` per record): an ``any`` with a CESQL part (an error in
one part of an ``any`` does not end it, which the loop's one error exit cannot express) and CESQL
nested too deeply for Python's compiler. Pure: no I/O.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from lark import Token, Tree

from ferry.filters import Filter, _string_test, cesql
from ferry.filters.attributes import (
    PER_PARTITION,
    RecordAttributes,
    _attribute_name,
    content_type_text,
    header_text,
    header_value,
    partitionkey_text,
    reader,
    rfc3339_ms,
)
from ferry.filters.cesql_codegen import _HELPERS, _Code, _Fail, _Gen, _literal, _verdict

Split = Callable[[list[Any]], tuple[list[Any], list[Any], int]]  # a fetch → (admitted, rejected, errors)


class Layout(NamedTuple):
    """Where a record tuple keeps the fields a filter reads."""

    offset: int
    key: int
    headers: int
    timestamp: int


class _Unsupported(Exception):
    """A document the loop does not cover (any failure to build the loop is treated alike)."""


def splitter(f: Filter, topic: str, partition: int, cluster: str, subscription: str, layout: Layout) -> Split | None:
    """The split function of ``f`` for the records of one partition, or ``None`` (see above)."""
    view = RecordAttributes(topic, partition, 0, None, (), 0, cluster, subscription)
    constants = {name: reader(name)(view) for name in PER_PARTITION}
    gen = _RecordGen(constants, layout, f"{topic}/{partition}/")
    try:
        test = gen.document(f.document)
        memo = "".join(f"\n            {line}" for _, lines in gen.memo.values() for line in lines)
        headers = f"r[{layout.headers}]"
        # Two loops over one iterator: the first runs while every record passes and keeps nothing
        # (most fetches of a filter that passes most records end there, and give back the list
        # itself); the second sorts the rest into the two lists.
        source = f"""
def _split(records):
    hs = _NONE
    rest = iter(records)
    for r in rest:
        if {headers} is not hs:
            hs = {headers}{memo}
        try:
            if {test}:
                continue
            errors = 0
        except _Fail:
            errors = 1
        break
    else:
        return records, [], 0
    admitted = records[: len(records) - _remaining(rest) - 1]
    rejected = [r]
    keep = admitted.append
    drop = rejected.append
    for r in rest:
        if {headers} is not hs:
            hs = {headers}{memo}
        try:
            if {test}:
                keep(r)
            else:
                drop(r)
        except _Fail:
            drop(r)
            errors += 1
    return admitted, rejected, errors
"""
        code = builtins.compile(source, "<filter>", "exec")
    except Exception:  # _Unsupported, too deep to compile, or a construct the loop lacks:
        return None  # the caller's per-record path gives the same verdicts
    seen: dict[bytes, str] = {}  # keys recur: their text is looked up, not percent-encoded again

    def pk(key: bytes) -> str:
        if len(seen) >= _KEYS_SEEN:
            seen.clear()
        text = seen[key] = partitionkey_text(key)
        return text

    namespace: dict[str, Any] = {**_HELPERS, **_RECORD_HELPERS, "_NONE": object(), **gen.consts}
    namespace.update(_pk=pk, _pk_seen=seen.get)
    exec(code, namespace)  # noqa: S102 - source generated from the filter; literals are repr()s
    return cast(Split, namespace["_split"])


def _content_type(headers: Sequence[tuple[str, bytes | None]]) -> str:
    return content_type_text(header_value(headers, "content-type"))


_RECORD_HELPERS: dict[str, Any] = {
    "_header": header_text,
    "_content_type": _content_type,
    "_time": rfc3339_ms,
    "_remaining": operator.length_hint,
}
_KEYS_SEEN = 4096
"""Record keys whose ``partitionkey`` text a split function keeps (then it starts again)."""


class _RecordGen(_Gen):
    """CESQL source over a record tuple ``r`` whose headers tuple is ``hs``: the partition's
    constants as literals, header attributes as variables set once per headers tuple."""

    def __init__(self, constants: dict[str, str], layout: Layout, id_prefix: str) -> None:
        super().__init__("_r", fast=True)
        self.memo: dict[str, tuple[str, list[str]]] = {}  # what → (variable, the lines setting it from hs)
        self._constants, self._layout, self._id_prefix = constants, layout, id_prefix
        self._kinds: dict[int, int] = {}  # id(CESQL node) → _CONSTANT, _HEADERS or _RECORD
        self._hoisting = False

    # --- the filter document --------------------------------------------------------------------

    def document(self, doc: dict[str, Any]) -> str:
        """A Python condition that is true when the document passes (raising ``_Fail`` when
        CESQL errs); ``doc`` was validated by :func:`ferry.filters.parse`."""
        ((dialect, arg),) = doc.items()
        if dialect in ("exact", "prefix", "suffix"):
            ((name, value),) = arg.items()
            if name in self._constants:  # decided now, by the dialect's own test
                return repr(_string_test(dialect, name, value)({name: self._constants[name]})[0])
            t = self.temp()
            test = {"exact": f"{t} == {value!r}", "prefix": f"{t}.startswith({value!r})"}.get(
                dialect, f"{t}.endswith({value!r})"
            )
            src = f"(({t} := {self.read(name)}) is not None and {test})"
            return src if name in _PER_RECORD else self._set(f"#{len(self.memo)}", src)
        if dialect == "all":
            return "(" + " and ".join(self.document(d) for d in arg) + ")"
        if dialect == "any":
            if any(_has_sql(d) for d in arg):
                raise _Unsupported
            return "(" + " or ".join(self.document(d) for d in arg) + ")"
        if dialect == "not":
            return f"(not {self.document(arg)})"
        tree = cesql.compile(arg).tree
        self._kinds = {}
        self._kind(tree)
        return _verdict(self.expr(tree))

    # --- attributes ---------------------------------------------------------------------------

    def read(self, name: str) -> str:
        """Source reading attribute ``name`` (not a partition constant) of record ``r``: its text,
        or None when the record has none."""
        lay = self._layout
        if name == "partitionkey":
            k = self.temp()
            c = self.temp()
            return (
                f"(({c} if ({c} := _pk_seen({k})) is not None else _pk({k}))"
                f" if ({k} := r[{lay.key}]) is not None else {self._memo('partitionkey')})"
            )
        if name == "kafkaoffset":
            return f"str(r[{lay.offset}])"
        if name == "id":
            return f"({self._id_prefix!r} + str(r[{lay.offset}]))"
        if name == "time":
            return f"_time(r[{lay.timestamp}])"
        if name == "datacontenttype":
            return self._memo("datacontenttype", "_content_type(hs)")
        if _attribute_name(name):
            return self._memo(name)
        return "None"  # no header can give it

    def _memo(self, what: str, source: str | None = None) -> str:
        """The variable holding ``source`` (by default: header ``what``'s text) for the current
        headers tuple."""
        if what not in self.memo:
            return self._set(what, source or f"_header(hs, {what!r})")
        return self.memo[what][0]

    def _set(self, what: str, source: str, may_fail: bool = False) -> str:
        """A new variable set to ``source`` for each headers tuple (``None`` when it fails)."""
        var = f"h{len(self.memo)}"
        if may_fail:
            self.memo[what] = (var, ["try:", f"    {var} = {source}", "except _Fail:", f"    {var} = None"])
        else:
            self.memo[what] = (var, [f"{var} = {source}"])
        return var

    # --- CESQL: what reads nothing of a record but its headers is evaluated once per headers tuple --

    def _kind(self, t: Tree[Token]) -> int:
        """What node ``t`` reads (the most of its parts): nothing of a record, its headers, or
        more; kept for :meth:`expr`."""
        if t.data in ("attribute", "exists"):
            name = str(t.children[0 if t.data == "attribute" else 1]).lower()
            kind = _CONSTANT if name in self._constants else _RECORD if name in _PER_RECORD else _HEADERS
        else:
            kind = max((self._kind(c) for c in t.children if isinstance(c, Tree)), default=_CONSTANT)
        self._kinds[id(t)] = kind
        return kind

    def expr(self, t: Tree[Token]) -> _Code:
        """A node that reads no more than the headers and is not a lone attribute or literal is
        evaluated when the headers tuple changes; each record then reads its value, or raises the
        error it gave (CESQL is pure, so this changes nothing but the cost)."""
        if self._hoisting or t.data in _NOT_HOISTED or self._kinds.get(id(t), _RECORD) == _RECORD:
            return self._expr(t)
        self._hoisting = True
        try:
            code = self._expr(t)
        finally:
            self._hoisting = False
        if code.lit is not None:
            return code
        var = self._set(f"#{len(self.memo)}", code.src, may_fail=True)
        if code.typ == "bool":  # True, False, or None for an error: one test when it is True
            return _Code(f"({var} or ({var} is None and _missing()))", "bool")
        return _Code(f"({var} if {var} is not None else _missing())", code.typ)

    def _expr(self, t: Tree[Token]) -> _Code:
        if t.data == "attribute" and str(t.children[0]).lower() in self._constants:
            return _literal(self._constants[str(t.children[0]).lower()])
        if t.data == "exists":
            name = str(t.children[1]).lower()
            return _Code("True" if name in self._constants else f"({self.read(name)} is not None)", "bool")
        return super().expr(t)

    def binary(self, op: str, left: _Code, right: _Code) -> _Code:
        return self._folded(super().binary(op, left, right), left, right)

    def call(self, name: str, args: list[_Code]) -> _Code:
        return self._folded(super().call(name, args), *args)

    def _folded(self, code: _Code, *operands: _Code) -> _Code:
        """``code`` evaluated now when its operands are literals (a partition's constants make
        ``kafkapartition < 6`` one), unless it errs: errors are left to each record."""
        if code.lit is not None or any(o.lit is None for o in operands):
            return code
        try:
            value = eval(code.src, {**_HELPERS, **self.consts})  # noqa: S307 - generated from literals
        except _Fail:
            return code
        return _literal(value) if isinstance(value, bool | int | str) else code


_CONSTANT, _HEADERS, _RECORD = 0, 1, 2
_PER_RECORD = frozenset({"partitionkey", "kafkaoffset", "id", "time"})
"""Attributes read from the record's own fields (the others: constants or from its headers)."""
_NOT_HOISTED = frozenset({"attribute", "integer", "string", "true", "false"})


def _has_sql(doc: Any) -> bool:
    ((dialect, arg),) = doc.items()
    if dialect == "sql":
        return True
    if dialect in ("all", "any"):
        return any(_has_sql(d) for d in arg)
    return dialect == "not" and _has_sql(arg)
