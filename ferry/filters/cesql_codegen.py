"""CESQL filter verdicts at the cost of one Python function call: a parse tree turned into the
source of one function, compiled once per expression (:func:`matcher`).

A filter needs only the verdict — ``(passes, erred)``: passes when the value is the Boolean
``true`` and no error occurred — not the value of every node or the list of errors
(:meth:`ferry.filters.cesql.Expression.evaluate` gives those). So the generated function evaluates
in the order of the specification's rules and short-circuits as they do, raises one private
exception at the first error (an error makes the verdict ``(False, True)`` whatever follows it),
and spends nothing on the path without errors that the operand types do not require:

- Types known at compile time (literals, the results of operators and functions) need no cast or
  check; literals are cast once, at compile time, when the cast succeeds (a failing one is left
  to fail at evaluation, where the specification puts it).
- An attribute is read once per use; a String value, what records carry, takes the fast path
  (``region = 'eu'`` is one lookup, a class check and ``==``), any other value the full cast. On
  the worker's record view the read is a reader made once for the name
  (:func:`ferry.filters.attributes.reader`), not a lookup by name per record.
- ``LIKE`` patterns that are a literal, a prefix, a suffix or an infix test become ``==``,
  ``startswith``, ``endswith`` and ``in``; ``IN`` over literals becomes a set lookup.

The generated source embeds only ``repr`` of literals and names from the grammar; anything else a
node needs (patterns, function implementations) is passed in by name. An expression nested too
deeply for Python's compiler gets ``None`` (the caller falls back to the closure evaluator). Pure.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from lark import Token, Tree

from ferry.filters.attributes import RecordAttributes, reader
from ferry.filters.cesql_values import (
    INT_MAX,
    INT_MIN,
    Errors,
    Event,
    Impl,
    Value,
    cast_to,
    integer,
    like_parts,
    like_regex,
    overload,
    to_bool,
    to_int,
    to_str,
    type_of,
    unquote,
    wrap,
)

Match = Callable[[Event], tuple[bool, bool]]  # → (passes, erred)


class _Fail(Exception):
    """An evaluation error: the verdict is (False, True)."""


def matcher(tree: Tree[Token]) -> Match | None:
    """The verdict function of a parsed expression, or ``None`` when it is too deeply nested."""
    gen, fast = _Gen("_k"), _Gen("_f", fast=True)
    try:
        body = _verdict(gen.expr(tree))
        lines = ["def _matches(e):", "    try:"]
        if gen.reads:  # the worker's record view: each attribute through its own reader
            fast_body = _verdict(fast.expr(tree))
            lines += ["        if e.__class__ is _RA:", f"            return {fast_body}, False", "        g = e.get"]
        lines += [f"        return {body}, False", "    except _Fail:", "        return False, True"]
        code = builtins.compile("\n".join(lines) + "\n", "<cesql>", "exec")
    except (RecursionError, MemoryError, SyntaxError):
        return None
    namespace: dict[str, Any] = {**_HELPERS, "_RA": RecordAttributes, **gen.consts, **fast.consts}
    exec(code, namespace)  # noqa: S102 - source generated from the parse tree; literals are repr()s
    return cast(Match, namespace["_matches"])


# --- run-time helpers (the error paths and the casts of values of unknown type) -------------------


_VALUE_TYPES = (bool, int, str)


def _attr(v: Any) -> Value:
    """An attribute value as CESQL sees it (not a String, Integer or Boolean: a String); ``None``
    is a missing attribute. The casts below take attribute values as read, too."""
    if v is None:
        raise _Fail
    return v if isinstance(v, _VALUE_TYPES) else str(v)


def _int(v: Any) -> int:
    if v.__class__ is str and v.isdigit() and v.isascii() and len(v) < 10:
        return int(v)
    errs: Errors = []
    n = to_int(_attr(v), errs)
    if errs:
        raise _Fail
    return n


def _bool(v: Any) -> bool:
    errs: Errors = []
    b = to_bool(_attr(v), errs)
    if errs:
        raise _Fail
    return b


def _str(v: Any) -> str:
    return to_str(_attr(v))


def _as(v: Value, x: Value) -> Value:
    """``x`` cast to the type of ``v``."""
    errs: Errors = []
    c = cast_to(x, type_of(v), errs)
    if errs:
        raise _Fail
    return c


def _eq(left: Value, right: Value) -> bool:
    """``=``: the left operand cast to the type of the right one."""
    return _as(right, left) == right


def _div(a: int, b: int) -> int:
    if b == 0:
        raise _Fail
    q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # truncated towards zero
    return wrap(q)


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise _Fail
    return a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1))


def _call(impl: Impl, args: list[Value]) -> Value:
    errs: Errors = []
    result = impl(args, errs)
    if errs:
        raise _Fail
    return result


def _in_literals(v: Value, values: tuple[Value, ...], strings: frozenset[str]) -> bool:
    """``v IN (literals)``: a set lookup for a String ``v``, else each literal cast to ``v``'s type."""
    if v.__class__ is str:
        return v in strings
    return any(_as(v, x) == v for x in values)


def _missing() -> Value:
    raise _Fail


def _false(_: Value) -> bool:
    return False


_HELPERS: dict[str, Any] = {
    "_Fail": _Fail,
    "_attr": _attr,
    "_int": _int,
    "_bool": _bool,
    "_str": _str,
    "_as": _as,
    "_eq": _eq,
    "_wrap": wrap,
    "_div": _div,
    "_mod": _mod,
    "_call": _call,
    "_in_literals": _in_literals,
    "_missing": _missing,
    "_false": _false,
}


_STR_METHODS = {"LOWER": "lower", "UPPER": "upper", "TRIM": "strip"}

# --- the tree → source ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Code:
    """A Python expression's source, its CESQL type (``int``, ``bool``, ``str``, or ``any``: a
    value read from the event) and, for a literal, its value."""

    src: str
    typ: str
    lit: tuple[Value] | None = None
    attribute: str | None = None


def _literal(v: Value) -> _Code:
    src = repr(v) if not isinstance(v, int) or isinstance(v, bool) or v >= 0 else f"({v})"
    return _Code(src, type_of(v), (v,))


def _verdict(root: _Code) -> str:
    """Only a Boolean passes: a value read from the event is checked, any other type fails."""
    if root.typ == "bool":
        return root.src
    return f"({root.src}) is True" if root.typ == "any" else f"_false({root.src})"


class _Gen:
    """Source for one expression. ``fast``: the event is a :class:`RecordAttributes`, read through
    one :func:`~ferry.filters.attributes.reader` per attribute name instead of ``e.get(name)``."""

    def __init__(self, prefix: str, fast: bool = False) -> None:
        self.consts: dict[str, Any] = {}
        self.reads = False
        self._prefix = prefix
        self._fast = fast
        self._readers: dict[str, str] = {}
        self._n = 0

    def read(self, name: str) -> str:
        """Source reading attribute ``name`` (lowercased) of the event ``e``."""
        if not self._fast:
            return f"g({name!r})"
        fn = self._readers.get(name)
        if fn is None:
            fn = self._readers[name] = self.const(reader(name))
        return f"{fn}(e)"

    def temp(self) -> str:
        self._n += 1
        return f"v{self._n}"

    def const(self, value: Any) -> str:
        name = f"{self._prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def cast(self, x: _Code, kind: str) -> str:
        """Source for ``x`` implicitly cast to ``kind`` (raising at a failed cast)."""
        if x.typ == kind:
            return x.src
        if x.lit is not None:
            errs: Errors = []
            v = cast_to(x.lit[0], kind, errs)
            if not errs:
                return _literal(v).src
        if x.attribute is not None:  # read and cast at once: one class check on the fast path
            t = self.temp()
            return f"({t} if ({t} := {self.read(x.attribute)}).__class__ is {kind} else _{kind}({t}))"
        if x.typ == "any":  # pragma: no cover - every value of unknown type is an attribute's
            t = self.temp()
            return f"({t} if ({t} := {x.src}).__class__ is {kind} else _{kind}({t}))"
        if kind == "str":
            return f"('true' if {x.src} else 'false')" if x.typ == "bool" else f"str({x.src})"
        if kind == "int" and x.typ == "bool":
            return f"(1 if {x.src} else 0)"
        return f"_{kind}({x.src})"

    def expr(self, t: Tree[Token]) -> _Code:
        rule, kids = t.data, t.children
        if rule == "integer":
            return _literal(integer(cast(Token, kids[0])))
        if rule in ("true", "false"):
            return _literal(rule == "true")
        if rule == "string":
            return _literal(unquote(str(kids[0])))
        if rule == "attribute":
            self.reads = True
            v = self.temp()
            name = str(kids[0]).lower()
            return _Code(f"({v} if ({v} := {self.read(name)}).__class__ is str else _attr({v}))", "any", None, name)
        if rule == "exists":
            return _Code(f"({str(kids[1]).lower()!r} in e)", "bool")
        if rule == "not_":
            return _Code(f"(not {self.cast(self.expr(kids[1]), 'bool')})", "bool")  # type: ignore[arg-type]
        if rule == "neg":
            v = self.temp()
            x = self.cast(self.expr(kids[1]), "int")  # type: ignore[arg-type]
            return _Code(f"(-{v} if ({v} := {x}) != {INT_MIN} else {v})", "int")
        if rule == "call":
            return self.call(str(kids[0]).upper(), [self.expr(k) for k in kids[1:] if isinstance(k, Tree)])
        if rule == "expr":
            return self.logic(t)
        if rule in ("cmp", "add", "mul"):
            node = self.expr(kids[0])  # type: ignore[arg-type]
            for i in range(1, len(kids), 2):
                node = self.binary(str(kids[i]), node, self.expr(kids[i + 1]))  # type: ignore[arg-type]
            return node
        if rule == "like":
            x = self.cast(self.expr(kids[0]), "str")  # type: ignore[arg-type]
            test = self.like(x, unquote(str(kids[-1].children[0])))  # type: ignore[union-attr]
            return _Code(f"(not {test})" if len(kids) == 4 else test, "bool")
        if rule == "in_":
            test = self.in_(self.expr(kids[0]), [self.expr(k) for k in kids[-1].children])  # type: ignore[arg-type, union-attr]
            return _Code(f"(not {test})" if len(kids) == 4 else test, "bool")
        raise ValueError(f"unsupported construct {rule}")  # pragma: no cover - the grammar has no other

    def logic(self, t: Tree[Token]) -> _Code:
        """``a AND (b AND c)`` as one flat ``a and b and c`` (so long chains nest nothing), without
        operands that cannot change it (a literal ``TRUE`` in ``AND``, ``FALSE`` in ``OR``); XOR
        as ``!=`` of two Booleans."""
        op = str(t.children[1]).upper()
        if op == "XOR":
            left, right = (self.cast(self.expr(k), "bool") for k in (t.children[0], t.children[2]))  # type: ignore[arg-type]
            return _Code(f"({left} != {right})", "bool")
        operands = []
        while isinstance(t, Tree) and t.data == "expr" and str(t.children[1]).upper() == op:
            operands.append(t.children[0])
            t = t.children[2]  # type: ignore[assignment]
        operands.append(t)
        neutral = "True" if op == "AND" else "False"
        srcs = [s for s in (self.cast(self.expr(k), "bool") for k in operands) if s != neutral]  # type: ignore[arg-type]
        return _Code(f"({f' {op.lower()} '.join(srcs)})" if srcs else neutral, "bool")

    def binary(self, op: str, left: _Code, right: _Code) -> _Code:
        if op in ("=", "!=", "<>"):
            py = "==" if op == "=" else "!="
            if right.typ == "any":
                test = f"_eq({left.src}, {right.src})"
                return _Code(test if op == "=" else f"(not {test})", "bool")
            return _Code(f"({self.cast(left, right.typ)} {py} {right.src})", "bool")
        a, b = self.cast(left, "int"), self.cast(right, "int")
        if op in ("<", "<=", ">", ">="):
            return _Code(f"({a} {op} {b})", "bool")
        if op == "/":
            return _Code(f"_div({a}, {b})", "int")
        if op == "%":
            return _Code(f"_mod({a}, {b})", "int")
        v = self.temp()
        return _Code(f"({v} if {INT_MIN} <= ({v} := {a} {op} {b}) <= {INT_MAX} else _wrap({v}))", "int")

    def like(self, x: str, pattern: str) -> str:
        parts = like_parts(pattern)
        lead = parts[:1] == [None]
        trail = len(parts) > int(lead) and parts[-1] is None
        inner = parts[int(lead) : len(parts) - int(trail)]
        if all(p for p in inner):  # only characters between an optional leading and trailing %
            text = repr("".join(cast(list[str], inner)))
            if lead and trail:
                return f"({text} in {x})"
            if lead:
                return f"{x}.endswith({text})"
            if trail:
                return f"{x}.startswith({text})"
            return f"({x} == {text})"
        return f"({self.const(like_regex(pattern))}.fullmatch({x}) is not None)"

    def in_(self, x: _Code, items: list[_Code]) -> str:
        if all(i.lit is not None for i in items):
            values = tuple(i.lit[0] for i in items)  # type: ignore[index]
            if x.typ == "any":
                strings = frozenset(to_str(v) for v in values)
                return f"_in_literals({x.src}, {self.const(values)}, {self.const(strings)})"
            errs: Errors = []
            cast_values = frozenset(cast_to(v, x.typ, errs) for v in values)
            if not errs:
                return f"({x.src} in {self.const(cast_values)})"
        v = self.temp()
        first = f"({v} := {x.src})"
        if x.typ == "any":
            tests = [f"{first if k == 0 else v} == _as({v}, {i.src})" for k, i in enumerate(items)]
        else:
            tests = [f"{first if k == 0 else v} == {self.cast(i, x.typ)}" for k, i in enumerate(items)]
        return f"({' or '.join(tests)})"

    def call(self, name: str, args: list[_Code]) -> _Code:
        found = overload(name, len(args))
        if found is None:
            return _Code("_missing()", "bool")
        params, variadic, ret, impl = found
        kinds = [params[i] if i < len(params) else str(variadic) for i in range(len(args))]
        srcs = [a.src if k == "any" else self.cast(a, k) for a, k in zip(args, kinds, strict=True)]
        if name == "LENGTH":
            return _Code(f"len({srcs[0]})", "int")
        if name in ("LOWER", "UPPER", "TRIM"):
            return _Code(f"{srcs[0]}.{_STR_METHODS[name]}()", "str")
        if name == "CONCAT":
            return _Code(f"''.join(({''.join(s + ', ' for s in srcs)}))", "str")
        if name == "CONCAT_WS":
            return _Code(f"{srcs[0]}.join(({''.join(s + ', ' for s in srcs[1:])}))", "str")
        if name in ("INT", "STRING"):
            return _Code(self.cast(args[0], ret), ret)
        if name == "IS_STRING":
            return _Code(f"isinstance({srcs[0]}, str)", "bool")
        return _Code(f"_call({self.const(impl)}, [{', '.join(srcs)}])", ret)
