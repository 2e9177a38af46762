"""CESQL's reference evaluator: a parse tree turned into a tree of closures that yields an
expression's value together with every error it met (:meth:`ferry.filters.cesql.Expression.evaluate`).

Each node returns ``(value, erred)`` and appends its errors to a list; an operator whose operand
erred yields its own zero value, ``AND``/``OR`` short-circuit. Filtering uses the generated
verdict function (:mod:`ferry.filters.cesql_codegen`), whose verdicts agree with this evaluator's
(tests/unit/test_filters_cesql_fast.py), and this one for an expression nested too deeply to
generate. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from lark import Token, Tree

from ferry.filters.cesql_values import (
    ZERO,
    CesqlParseError,
    Errors,
    Event,
    Value,
    cast_to,
    integer,
    like_regex,
    overload,
    to_bool,
    to_int,
    to_str,
    type_of,
    unquote,
    wrap,
)

Node = Callable[[Event, Errors], tuple[Value, bool]]  # → (value, erred)


def build(t: Tree[Token] | Token) -> Node:
    if isinstance(t, Token):  # pragma: no cover - every token is wrapped by a rule
        raise CesqlParseError(f"unexpected {t!s}")
    rule = t.data
    kids = t.children
    if rule == "integer":
        n = integer(cast(Token, kids[0]))
        return lambda e, errs, n=n: (n, False)  # type: ignore[misc]
    if rule == "true":
        return lambda e, errs: (True, False)
    if rule == "false":
        return lambda e, errs: (False, False)
    if rule == "string":
        s = unquote(str(kids[0]))
        return lambda e, errs, s=s: (s, False)  # type: ignore[misc]
    if rule == "attribute":
        return _attribute(str(kids[0]))
    if rule == "exists":
        name = str(kids[1]).lower()
        return lambda e, errs: (name in e, False)
    if rule == "not_":
        return _not(build(kids[1]))
    if rule == "neg":
        return _neg(build(kids[1]))
    if rule == "call":
        name = str(kids[0]).upper()
        return _call(name, [build(k) for k in kids[1:] if not isinstance(k, Token)])
    if rule == "expr":
        return _logic(str(kids[1]).upper(), build(kids[0]), build(kids[2]))
    if rule in ("cmp", "add", "mul"):
        node = build(kids[0])
        for i in range(1, len(kids), 2):
            node = _binary(str(kids[i]), node, build(kids[i + 1]))
        return node
    if rule == "like":
        negate = len(kids) == 4  # unary NOT LIKE string
        return _like(build(kids[0]), unquote(str(kids[-1].children[0])), negate)  # type: ignore[union-attr]
    if rule == "in_":
        negate = len(kids) == 4
        items = [build(k) for k in kids[-1].children]  # type: ignore[union-attr]
        return _in(build(kids[0]), items, negate)
    raise CesqlParseError(f"unsupported construct {rule}")  # pragma: no cover


def _attribute(name: str) -> Node:
    name = name.lower()  # attribute names are lowercase; identifiers are case-insensitive

    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        v = e.get(name)
        if v is None:
            errs.append("missingAttribute")
            return False, True
        if isinstance(v, bool | int | str):
            return v, False
        return str(v), False

    return node


def _not(x: Node) -> Node:
    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        v, erred = x(e, errs)
        if erred:
            return False, True
        before = len(errs)
        b = to_bool(v, errs)
        return (not b), len(errs) > before

    return node


def _neg(x: Node) -> Node:
    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        v, erred = x(e, errs)
        if erred:
            return 0, True
        before = len(errs)
        return wrap(-to_int(v, errs)), len(errs) > before

    return node


def _logic(op: str, left: Node, right: Node) -> Node:
    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        lv, erred = left(e, errs)
        if erred:
            return False, True
        before = len(errs)
        lb = to_bool(lv, errs)
        if len(errs) > before:
            return False, True
        if op == "AND" and not lb:
            return False, False
        if op == "OR" and lb:
            return True, False
        rv, erred = right(e, errs)
        if erred:
            return False, True
        rb = to_bool(rv, errs)
        if len(errs) > before:
            return False, True
        return (lb != rb if op == "XOR" else rb), False

    return node


def _binary(op: str, left: Node, right: Node) -> Node:
    if op in ("=", "!=", "<>"):
        negate = op != "="

        def eq(e: Event, errs: Errors) -> tuple[Value, bool]:
            lv, le = left(e, errs)
            if le:
                return False, True
            rv, re_ = right(e, errs)
            if re_:
                return False, True
            before = len(errs)
            target = type_of(rv)
            lc = cast_to(lv, target, errs)
            if len(errs) > before:
                return False, True
            return (lc != rv) if negate else (lc == rv), False

        return eq

    def ints(e: Event, errs: Errors) -> tuple[int, int] | None:
        lv, le = left(e, errs)
        if le:
            return None
        rv, re_ = right(e, errs)
        if re_:
            return None
        before = len(errs)
        a, b = to_int(lv, errs), to_int(rv, errs)
        return None if len(errs) > before else (a, b)

    if op in ("<", "<=", ">", ">="):
        compare: Callable[[int, int], bool] = {
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }[op]

        def cmp(e: Event, errs: Errors) -> tuple[Value, bool]:
            pair = ints(e, errs)
            return (False, True) if pair is None else (compare(*pair), False)

        return cmp

    def arith(e: Event, errs: Errors) -> tuple[Value, bool]:
        pair = ints(e, errs)
        if pair is None:
            return 0, True
        a, b = pair
        if op in ("/", "%") and b == 0:
            errs.append("math")
            return 0, True
        if op == "+":
            return wrap(a + b), False
        if op == "-":
            return wrap(a - b), False
        if op == "*":
            return wrap(a * b), False
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # truncated towards zero
        return (wrap(q), False) if op == "/" else (a - b * q, False)

    return arith


def _like(x: Node, pattern: str, negate: bool) -> Node:
    rx = like_regex(pattern)

    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        v, erred = x(e, errs)
        if erred:
            return False, True
        return (rx.fullmatch(to_str(v)) is None) if negate else (rx.fullmatch(to_str(v)) is not None), False

    return node


def _in(x: Node, items: list[Node], negate: bool) -> Node:
    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        v, erred = x(e, errs)
        if erred:
            return False, True
        target = type_of(v)
        found = False
        for item in items:
            iv, ierr = item(e, errs)
            if ierr:
                return False, True
            before = len(errs)
            cv = cast_to(iv, target, errs)
            if len(errs) > before:
                return False, True
            if cv == v:
                found = True
                break
        return (not found) if negate else found, False

    return node


def _call(name: str, args: list[Node]) -> Node:
    found = overload(name, len(args))
    if found is None:

        def missing(e: Event, errs: Errors) -> tuple[Value, bool]:
            errs.append("missingFunction")
            return False, True

        return missing
    params, variadic, ret, impl = found

    def node(e: Event, errs: Errors) -> tuple[Value, bool]:
        values: list[Value] = []
        before = len(errs)
        for i, arg in enumerate(args):
            v, erred = arg(e, errs)
            if erred:
                return ZERO[ret], True
            kind = params[i] if i < len(params) else variadic
            values.append(v if kind == "any" else cast_to(v, str(kind), errs))
        if len(errs) > before:
            return ZERO[ret], True
        result = impl(values, errs)
        return result, len(errs) > before

    return node
