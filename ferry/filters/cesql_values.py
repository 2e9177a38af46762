"""CloudEvents SQL (CESQL) v1 values: the three types, their casts, literals, ``LIKE`` patterns and
the built-in functions — what both of :mod:`ferry.filters.cesql`'s evaluators share. Pure.

- Three types: String, Integer (32-bit) and Boolean; attribute values that are none of them are
  Strings.
- A cast that cannot be made is a *cast error*: the cast appends ``"cast"`` to the error list and
  yields the zero value of the target type (``""``, ``0``, ``false``). There is no implicit
  Integer → Boolean cast; :func:`to_bool` makes it only when asked to explicitly (``BOOL(x)``).
- A function appends its own error kinds (``functionEvaluation``, ``math``) the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from lark import Token

from ferry.errors import FerryError

Value = bool | int | str
Event = Mapping[str, Any]
Errors = list[str]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


class CesqlParseError(FerryError):
    """The expression is not valid CESQL; ``line``/``column`` say where (1-based)."""

    def __init__(self, message: str, line: int = 1, column: int = 1, context: str = "") -> None:
        super().__init__(f"{message} at line {line}, column {column}" + (f":\n{context}" if context else ""))
        self.line = line
        self.column = column


# --- literals ----------------------------------------------------------------------------------


def integer(tok: Token) -> int:
    """An integer literal's value; one outside the 32-bit range is a parse error."""
    n = int(str(tok))
    if not INT_MIN <= n <= INT_MAX:
        raise CesqlParseError(f"integer {n} is out of the 32-bit range", tok.line or 1, tok.column or 1)
    return n


def unquote(lit: str) -> str:
    """A string literal's value: the delimiter escaped (``\\'`` or doubled) becomes itself; every
    other backslash is kept (``LIKE`` patterns give ``\\%`` and ``\\_`` their own meaning)."""
    q, body = lit[0], lit[1:-1]
    if "\\" not in body:
        return body.replace(q + q, q)
    out: list[str] = []
    i = 0
    while i < len(body):  # left to right as the lexer reads: in 'x\\''' a backslash pair, then one quote
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(q if nxt == q else c + nxt)
            i += 2
        elif c == q:  # the first of a doubled delimiter
            out.append(q)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


# --- casts ---------------------------------------------------------------------------------


def type_of(v: Value) -> str:
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "str"


def wrap(n: int) -> int:
    """``n`` wrapped into the 32-bit range (two's complement overflow)."""
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


def cast_to(v: Value, kind: str, errors: Errors) -> Value:
    if kind == "int":
        return to_int(v, errors)
    if kind == "bool":
        return to_bool(v, errors)
    return to_str(v)


ZERO: dict[str, Value] = {"int": 0, "bool": False, "str": ""}


# --- LIKE --------------------------------------------------------------------------------------


def like_parts(pattern: str) -> list[str | None]:
    """A ``LIKE`` pattern as its parts: a character to match itself, ``None`` for ``%`` (any run)
    and ``""`` for ``_`` (any one character). ``\\%`` and ``\\_`` are the characters themselves."""
    out: list[str | None] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and pattern[i + 1] in "%_":
            out.append(pattern[i + 1])
            i += 2
            continue
        out.append(None if c == "%" else "" if c == "_" else c)
        i += 1
    return out


def like_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression whose ``fullmatch`` is ``LIKE pattern``."""
    parts = like_parts(pattern)
    return re.compile("".join(".*" if p is None else "." if p == "" else re.escape(p) for p in parts), re.DOTALL)


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


Overload = tuple[tuple[str, ...], str | None, str, Impl]

# name → (parameter types, variadic type or None, return type, implementation). Casting functions
# take their argument as it is (their own cast is explicit).
FUNCTIONS: dict[str, list[Overload]] = {
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


def overload(name: str, arity: int) -> Overload | None:
    """The overload of function ``name`` (upper case) that takes ``arity`` arguments, or ``None``
    (a ``missingFunction`` error when evaluated)."""
    for params, variadic, ret, impl in FUNCTIONS.get(name, []):
        if arity == len(params) or (variadic is not None and arity >= len(params)):
            return params, variadic, ret, impl
    return None
