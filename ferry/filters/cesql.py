"""CloudEvents SQL (CESQL) v1: parse an expression once, evaluate it per event cheaply.

Use case: a subscription's ``{"sql": "..."}`` filter (docs/filters.md). :func:`compile` parses the
expression with lark from the specification's grammar and turns it into a tree of closures, so a
record costs one call per node and no re-parsing. Pure: no I/O.

Semantics, as the specification and its conformance suite (TCK) define them:

- Three types: String, Integer (32-bit) and Boolean; attribute values that are none of them are
  Strings. Keywords and function names are case-insensitive; string literals and attribute values
  are not.
- Operators cast their operands implicitly (``'5' + 3`` is 8; ``=`` casts its left operand to the
  type of its right one; ``IN`` casts the set to the type of its left operand). A cast that cannot
  be made is a *cast error* and yields the zero value of the target type (``""``, ``0``, ``false``).
- Every expression evaluates to a value and a list of errors (never an exception): a missing
  attribute, a division by zero, a failed cast, an unknown function, a function used wrongly. An
  operator whose operand erred yields its own zero value; ``AND``/``OR`` short-circuit.
- A parse error raises :class:`CesqlParseError` at compile time, with line and column.

For filtering, a result is true only when it is the Boolean ``true`` with no error (an evaluation
error makes the filter false and is counted: :meth:`Expression.matches`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from lark import Lark, Token, Tree, UnexpectedInput

from ferry.errors import FerryError

Value = bool | int | str
Event = Mapping[str, Any]
Errors = list[str]
Node = Callable[[Event, Errors], tuple[Value, bool]]  # → (value, erred)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1

# Precedence from the specification's ANTLR grammar (highest first): function invocation, NOT,
# unary minus, LIKE, EXISTS, IN, * / %, + -, comparisons, and AND/OR/XOR (one level, right-assoc).
GRAMMAR = r"""
?start: expr
?expr: cmp (LOGIC expr)?
?cmp: add (CMP add)*
?add: mul (ADD_OP mul)*
?mul: postfix (MUL_OP postfix)*
?postfix: unary
        | unary LIKE string -> like
        | unary NOT LIKE string -> like
        | unary IN set -> in_
        | unary NOT IN set -> in_
?unary: NOT unary -> not_
      | MINUS unary -> neg
      | EXISTS IDENT -> exists
      | atom
?atom: FUNC "(" [expr ("," expr)*] ")" -> call
     | "(" expr ")"
     | INT -> integer
     | TRUE -> true
     | FALSE -> false
     | string
     | IDENT -> attribute
set: "(" expr ("," expr)* ")"
string: DSTRING | SSTRING

LOGIC.2: /(?i:and|or|xor)(?![A-Za-z0-9_])/
NOT.2: /(?i:not)(?![A-Za-z0-9_])/
IN.2: /(?i:in)(?![A-Za-z0-9_])/
LIKE.2: /(?i:like)(?![A-Za-z0-9_])/
EXISTS.2: /(?i:exists)(?![A-Za-z0-9_])/
TRUE.2: /(?i:true)(?![A-Za-z0-9_])/
FALSE.2: /(?i:false)(?![A-Za-z0-9_])/
FUNC.3: /[A-Za-z][A-Za-z_]*(?=\s*\()/
IDENT: /[A-Za-z0-9]+/
INT.1: /[+-]?[0-9]+/
CMP: "<>" | "!=" | "<=" | ">=" | "=" | "<" | ">"
MUL_OP: "*" | "/" | "%"
ADD_OP: "+" | MINUS
MINUS: "-"
DSTRING: /"(\\.|""|[^"\\])*"/
SSTRING: /'(\\.|''|[^'\\])*'/
%ignore /[ \t\r\n]+/
"""

_PARSER = Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)


class CesqlParseError(FerryError):
    """The expression is not valid CESQL; ``line``/``column`` say where (1-based)."""

    def __init__(self, message: str, line: int = 1, column: int = 1, context: str = "") -> None:
        super().__init__(f"{message} at line {line}, column {column}" + (f":\n{context}" if context else ""))
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Expression:
    """A compiled CESQL expression."""

    source: str
    _root: Node
    functions: frozenset[str]

    def evaluate(self, event: Event) -> tuple[Value, list[str]]:
        """The value and the errors (kinds: ``missingAttribute``, ``math``, ``cast``,
        ``missingFunction``, ``functionEvaluation``)."""
        errors: Errors = []
        value, _ = self._root(event, errors)
        return value, errors

    def matches(self, event: Event) -> tuple[bool, bool]:
        """(passes, erred): the filter's verdict — true only for a Boolean true without errors."""
        errors: Errors = []
        value, erred = self._root(event, errors)
        if errors or erred:
            return False, True
        return value is True, False


def compile(source: str) -> Expression:
    try:
        tree = _PARSER.parse(source)
    except UnexpectedInput as exc:
        line, column = getattr(exc, "line", 1) or 1, getattr(exc, "column", 1) or 1
        what = "unexpected end of the expression" if getattr(exc, "token", None) == "" else "unexpected input"
        token = getattr(exc, "token", None)
        if token is not None and str(token):
            what = f"unexpected {str(token)!r}"
        raise CesqlParseError(what, line, column, exc.get_context(source).rstrip()) from None
    used: set[str] = set()
    root = _build(tree, used)
    return Expression(source, root, frozenset(used))


# --- casts ---------------------------------------------------------------------------------


def _type(v: Value) -> str:
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "str"


def _wrap(n: int) -> int:
    return (n - INT_MIN) % 2**32 + INT_MIN


def to_int(v: Value, errors: Errors) -> int:
    cls = v.__class__
    if cls is int:
        return v  # type: ignore[return-value]
    if cls is bool:
        return 1 if v else 0
    text = str(v).strip()
    if text.isascii() and (text[1:] if text[:1] in "+-" else text).isdigit():
        n = int(text)
        if INT_MIN <= n <= INT_MAX:
            return n
    errors.append("cast")
    return 0


def to_bool(v: Value, errors: Errors, explicit: bool = False) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        if explicit:
            return v != 0
        errors.append("cast")  # no implicit Integer → Boolean cast (the conformance suite's NOT 10)
        return False
    low = v.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    errors.append("cast")
    return False


def to_str(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _cast(v: Value, kind: str, errors: Errors) -> Value:
    if kind == "int":
        return to_int(v, errors)
    if kind == "bool":
        return to_bool(v, errors)
    return to_str(v)


_ZERO: dict[str, Value] = {"int": 0, "bool": False, "str": ""}


# --- the tree → closures ---------------------------------------------------------------------


def _build(t: Tree[Token] | Token, used: set[str]) -> Node:
    if isinstance(t, Token):  # pragma: no cover - every token is wrapped by a rule
        raise CesqlParseError(f"unexpected {t!s}")
    rule = t.data
    kids = t.children
    if rule == "integer":
        tok = cast(Token, kids[0])
        n = int(str(tok))
        if not INT_MIN <= n <= INT_MAX:
            raise CesqlParseError(f"integer {n} is out of the 32-bit range", tok.line or 1, tok.column or 1)
        return lambda e, errs, n=n: (n, False)  # type: ignore[misc]
    if rule == "true":
        return lambda e, errs: (True, False)
    if rule == "false":
        return lambda e, errs: (False, False)
    if rule == "string":
        s = _unquote(str(kids[0]))
        return lambda e, errs, s=s: (s, False)  # type: ignore[misc]
    if rule == "attribute":
        return _attribute(str(kids[0]))
    if rule == "exists":
        name = str(kids[1]).lower()
        return lambda e, errs: (name in e, False)
    if rule == "not_":
        return _not(_build(kids[1], used))
    if rule == "neg":
        return _neg(_build(kids[1], used))
    if rule == "call":
        name = str(kids[0]).upper()
        used.add(name)
        return _call(name, [_build(k, used) for k in kids[1:] if not isinstance(k, Token)])
    if rule == "expr":
        return _logic(str(kids[1]).upper(), _build(kids[0], used), _build(kids[2], used))
    if rule in ("cmp", "add", "mul"):
        node = _build(kids[0], used)
        for i in range(1, len(kids), 2):
            node = _binary(str(kids[i]), node, _build(kids[i + 1], used))
        return node
    if rule == "like":
        negate = len(kids) == 4  # unary NOT LIKE string
        return _like(_build(kids[0], used), _unquote(str(kids[-1].children[0])), negate)  # type: ignore[union-attr]
    if rule == "in_":
        negate = len(kids) == 4
        items = [_build(k, used) for k in kids[-1].children]  # type: ignore[union-attr]
        return _in(_build(kids[0], used), items, negate)
    raise CesqlParseError(f"unsupported construct {rule}")  # pragma: no cover


def _unquote(lit: str) -> str:
    """A string literal's value: the delimiter escaped (``\\'`` or doubled) becomes itself; every
    other backslash is kept (``LIKE`` patterns give ``\\%`` and ``\\_`` their own meaning)."""
    q, body = lit[0], lit[1:-1]
    return body.replace("\\" + q, q).replace(q + q, q)


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
        return _wrap(-to_int(v, errs)), len(errs) > before

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
            target = _type(rv)
            lc = _cast(lv, target, errs)
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
            return _wrap(a + b), False
        if op == "-":
            return _wrap(a - b), False
        if op == "*":
            return _wrap(a * b), False
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # truncated towards zero
        return (_wrap(q), False) if op == "/" else (a - b * q, False)

    return arith


def _like_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and pattern[i + 1] in "%_":
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _like(x: Node, pattern: str, negate: bool) -> Node:
    rx = _like_regex(pattern)

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
        target = _type(v)
        found = False
        for item in items:
            iv, ierr = item(e, errs)
            if ierr:
                return False, True
            before = len(errs)
            cv = _cast(iv, target, errs)
            if len(errs) > before:
                return False, True
            if cv == v:
                found = True
                break
        return (not found) if negate else found, False

    return node


# --- functions ---------------------------------------------------------------------------------

Impl = Callable[[list[Value], Errors], Value]


def _substring(args: list[Value], errs: Errors) -> Value:
    s, pos = str(args[0]), int(args[1])
    length = int(args[2]) if len(args) == 3 else None
    n = len(s)
    if pos == 0:
        return ""
    if pos > n or pos < -n or (length is not None and length < 0):
        errs.append("functionEvaluation")
        return ""
    start = pos - 1 if pos > 0 else n + pos
    return s[start:] if length is None else s[start : start + length]


def _left(args: list[Value], errs: Errors) -> Value:
    s, y = str(args[0]), int(args[1])
    if y < 0:
        errs.append("functionEvaluation")
        return s
    return s[:y]


def _right(args: list[Value], errs: Errors) -> Value:
    s, y = str(args[0]), int(args[1])
    if y < 0:
        errs.append("functionEvaluation")
        return s
    return s[len(s) - y :] if y < len(s) else s


def _abs(args: list[Value], errs: Errors) -> Value:
    x = int(args[0])
    if x == INT_MIN:
        errs.append("math")
        return INT_MAX
    return abs(x)


# name → (parameter types, variadic type or None, return type, implementation). Casting functions
# take their argument as it is (their own cast is explicit).
FUNCTIONS: dict[str, list[tuple[tuple[str, ...], str | None, str, Impl]]] = {
    "LENGTH": [(("str",), None, "int", lambda a, _: len(str(a[0])))],
    "CONCAT": [((), "str", "str", lambda a, _: "".join(str(x) for x in a))],
    "CONCAT_WS": [(("str",), "str", "str", lambda a, _: str(a[0]).join(str(x) for x in a[1:]))],
    "LOWER": [(("str",), None, "str", lambda a, _: str(a[0]).lower())],
    "UPPER": [(("str",), None, "str", lambda a, _: str(a[0]).upper())],
    "TRIM": [(("str",), None, "str", lambda a, _: str(a[0]).strip())],
    "LEFT": [(("str", "int"), None, "str", _left)],
    "RIGHT": [(("str", "int"), None, "str", _right)],
    "SUBSTRING": [(("str", "int"), None, "str", _substring), (("str", "int", "int"), None, "str", _substring)],
    "ABS": [(("int",), None, "int", _abs)],
    "INT": [(("any",), None, "int", lambda a, errs: to_int(a[0], errs))],
    "BOOL": [(("any",), None, "bool", lambda a, errs: to_bool(a[0], errs, explicit=True))],
    "STRING": [(("any",), None, "str", lambda a, _: to_str(a[0]))],
    "IS_INT": [(("any",), None, "bool", lambda a, _: _castable(a[0], "int"))],
    "IS_BOOL": [(("any",), None, "bool", lambda a, _: _castable(a[0], "bool"))],
    "IS_STRING": [(("any",), None, "bool", lambda a, _: isinstance(a[0], str))],
}


def _castable(v: Value, kind: str) -> bool:
    probe: Errors = []
    if kind == "int":
        to_int(v, probe)
    else:
        to_bool(v, probe, explicit=True)
    return not probe


def _call(name: str, args: list[Node]) -> Node:
    overloads = FUNCTIONS.get(name, [])
    found = None
    for params, variadic, ret, impl in overloads:
        if len(args) == len(params) or (variadic is not None and len(args) >= len(params)):
            found = (params, variadic, ret, impl)
            break
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
                return _ZERO[ret], True
            kind = params[i] if i < len(params) else variadic
            values.append(v if kind == "any" else _cast(v, str(kind), errs))
        if len(errs) > before:
            return _ZERO[ret], True
        result = impl(values, errs)
        return result, len(errs) > before

    return node
