"""CloudEvents SQL (CESQL) v1: parse an expression once, evaluate it per event cheaply.

Use case: a subscription's ``{"sql": "..."}`` filter (docs/filters.md). :func:`compile` parses the
expression once with lark from the specification's grammar and builds two evaluators of it:
:attr:`Expression.matches`, the filter's verdict, generated as one Python function
(:mod:`ferry.filters.cesql_codegen`, about 0.3 µs for four clauses on strings), and
:meth:`Expression.evaluate`, the value with every error, from a tree of closures
(:mod:`ferry.filters.cesql_eval`). Pure: no I/O.

Semantics, as the specification and its conformance suite (TCK) define them:

- Three types: String, Integer (32-bit) and Boolean; attribute values that are none of them are
  Strings. Keywords and function names are case-insensitive; string literals and attribute values
  are not.
- Operators cast their operands implicitly (``'5' + 3`` is 8; ``=`` casts its left operand to the
  type of its right one; ``IN`` casts the set to the type of its left operand). A cast that cannot
  be made is a *cast error* and yields the zero value of the target type (``""``, ``0``, ``false``)
  (:mod:`ferry.filters.cesql_values`).
- Every expression evaluates to a value and a list of errors (never an exception): a missing
  attribute, a division by zero, a failed cast, an unknown function, a function used wrongly. An
  operator whose operand erred yields its own zero value; ``AND``/``OR`` short-circuit.
- A parse error raises :class:`CesqlParseError` at compile time, with line and column; so does
  :func:`check_filter` for valid CESQL that could never pass a record as a filter (an unknown
  function, a wrong number of arguments, a value always an Integer or a String).

For filtering, a result is true only when it is the Boolean ``true`` with no error (an evaluation
error makes the filter false and is counted: :meth:`Expression.matches`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from lark import Lark, Token, Tree, UnexpectedInput

from ferry.filters.cesql_codegen import matcher
from ferry.filters.cesql_eval import Node, build
from ferry.filters.cesql_values import FUNCTIONS, CesqlParseError, Errors, Event, Value, overload

__all__ = ["FUNCTIONS", "CesqlParseError", "Expression", "Value", "check_filter", "compile"]

# Precedence from the specification's ANTLR grammar (highest first): function invocation, NOT,
# unary minus, LIKE, EXISTS, IN, * / %, + -, comparisons, and AND/OR/XOR (one level, right-assoc).
# A keyword is never a function name, as in the specification's lexer, where keywords come first:
# FUNC outranks the keywords (so INT( or ISNOT( is a call) but refuses a keyword before "(", so
# NOT (x), x AND(y) and x IN(1) are operators and TRUE(1) or EXISTS(x) are parse errors.
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
FUNC.3: /(?!(?i:and|or|xor|not|in|like|exists|true|false)(?![A-Za-z_]))[A-Za-z][A-Za-z_]*(?=\s*\()/
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


@functools.cache
def _parser() -> Lark:
    """The grammar's parser, built on the first expression (not at import: most processes that
    import filters never meet a CESQL one, and building it takes tens of milliseconds)."""
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)


@dataclass(frozen=True)
class Expression:
    """A compiled CESQL expression. ``matches(event)`` is the filter's verdict ``(passes, erred)``:
    it passes only for the Boolean ``true`` without errors; an evaluation error gives
    ``(False, True)``."""

    source: str
    _root: Node
    functions: frozenset[str]
    matches: Callable[[Event], tuple[bool, bool]]
    tree: Tree[Token]

    def evaluate(self, event: Event) -> tuple[Value, list[str]]:
        """The value and the errors (kinds: ``missingAttribute``, ``math``, ``cast``,
        ``missingFunction``, ``functionEvaluation``)."""
        errors: Errors = []
        value, _ = self._root(event, errors)
        return value, errors


def _closure_matches(root: Node) -> Callable[[Event], tuple[bool, bool]]:
    def matches(event: Event) -> tuple[bool, bool]:
        errors: Errors = []
        value, erred = root(event, errors)
        if errors or erred:
            return False, True
        return value is True, False

    return matches


MAX_DEPTH = 200
"""How deeply operators may nest (``a OR b OR c`` nests one level per ``OR``). Deeper expressions
are refused when registered: evaluating them would exhaust Python's stack in the worker."""


_CHAINS = frozenset({"cmp", "add", "mul"})


def _too_deep(tree: Tree[Token]) -> tuple[int, Token | None] | None:
    """The nesting depth and the deepest token when beyond :data:`MAX_DEPTH`, else None (walks
    the tree without recursion, so any input is measured)."""
    deepest, where = 0, None
    stack: list[tuple[Tree[Token] | Token, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Token):
            if depth > deepest:
                deepest, where = depth, node
            continue
        # a chain of one precedence (a + b + c) is one flat node, evaluated as nested pairs
        step = max(1, (len(node.children) - 1) // 2) if node.data in _CHAINS else 1
        stack.extend((child, depth + step) for child in node.children)
    return (deepest, where) if deepest > MAX_DEPTH else None


@functools.lru_cache(maxsize=256)
def compile(source: str) -> Expression:
    """The compiled expression of ``source`` (raising :class:`CesqlParseError`). Kept for the
    sources seen last: a worker compiles a subscription's filter for each of its partitions."""
    try:
        tree = _parser().parse(source)
    except UnexpectedInput as exc:
        line, column = getattr(exc, "line", 1) or 1, getattr(exc, "column", 1) or 1
        what = "unexpected end of the expression" if getattr(exc, "token", None) == "" else "unexpected input"
        token = getattr(exc, "token", None)
        if token is not None and str(token):
            what = f"unexpected {str(token)!r}"
        raise CesqlParseError(what, line, column, exc.get_context(source).rstrip()) from None
    deep = _too_deep(tree)
    if deep is not None:
        depth, token = deep
        raise CesqlParseError(
            f"the expression nests {depth} levels deep, at most {MAX_DEPTH} are allowed (a long chain of "
            "OR over one attribute is shorter as x IN (...); or split the filter with the 'any' dialect)",
            (token.line or 1) if token is not None else 1,
            (token.column or 1) if token is not None else 1,
        )
    root = build(tree)
    used = {str(t.children[0]).upper() for t in tree.iter_subtrees() if t.data == "call"}
    return Expression(source, root, frozenset(used), matcher(tree) or _closure_matches(root), tree)


# --- what a filter refuses when it is saved ------------------------------------------------------

_TYPE_NAMES = {"int": "an Integer", "str": "a String", "bool": "a Boolean"}
_INT_RULES = frozenset({"integer", "neg", "add", "mul"})


def arities(name: str) -> str:
    """The numbers of arguments built-in function ``name`` takes, in words: ``1 argument``,
    ``2 or 3 arguments``, ``at least 1 argument``."""
    counts = [f"at least {len(p)}" if v is not None else str(len(p)) for p, v, _, _ in FUNCTIONS[name]]
    last = len(FUNCTIONS[name][-1][0])
    return f"{' or '.join(counts)} argument{'' if last == 1 else 's'}"


def static_type(tree: Tree[Token]) -> str | None:
    """The type of the expression's value when it is known without evaluating it (``int``,
    ``str``, ``bool``), else ``None`` (an attribute's value, a call that cannot be dispatched)."""
    rule = tree.data
    if rule in _INT_RULES:
        return "int"
    if rule == "string":
        return "str"
    if rule == "attribute":
        return None
    if rule == "call":
        found = overload(str(tree.children[0]).upper(), sum(isinstance(k, Tree) for k in tree.children[1:]))
        return found[2] if found is not None else None
    return "bool"  # literals TRUE and FALSE, comparisons, AND/OR/XOR, NOT, LIKE, IN, EXISTS


def _first_token(tree: Tree[Token]) -> Token | None:
    return next(tree.scan_values(lambda v: isinstance(v, Token)), None)


def _context(source: str, token: Token | None, span: int = 40) -> str:
    """The line around ``token`` with a caret under it (as lark shows a parse error)."""
    pos = token.start_pos or 0 if token is not None else 0
    before = source[max(pos - span, 0) : pos].rsplit("\n", 1)[-1]
    after = source[pos : pos + span].split("\n", 1)[0]
    return f"{before}{after}\n{' ' * len(before.expandtabs())}^"


def _refuse(expr: Expression, message: str, token: Token | None) -> CesqlParseError:
    line, column = (token.line or 1, token.column or 1) if token is not None else (1, 1)
    return CesqlParseError(message, line, column, _context(expr.source, token))


def check_filter(expr: Expression) -> None:
    """Raise :class:`CesqlParseError` when ``expr`` is valid CESQL but could never pass a record as
    a filter, so it is refused when the subscription is saved rather than rejecting every record
    (the specification asks for such checks at compile time where possible, section 3.3, and a
    filter's value to be a Boolean, section 1.2): a call of a function CESQL lacks, or of a built-in
    with a number of arguments it does not take (both ``missingFunction`` when evaluated), and an
    expression whose value is known to be an Integer or a String without evaluating it."""
    calls = [t for t in expr.tree.iter_subtrees() if t.data == "call"]
    for call in sorted(calls, key=lambda t: cast(Token, t.children[0]).start_pos or 0):  # the first in the text
        token = cast(Token, call.children[0])
        name, n = str(token).upper(), sum(isinstance(k, Tree) for k in call.children[1:])
        if name not in FUNCTIONS:
            raise _refuse(expr, f"unknown function {name}; CESQL has {', '.join(sorted(FUNCTIONS))}", token)
        if overload(name, n) is None:
            raise _refuse(expr, f"wrong number of arguments for {name} ({n}; it takes {arities(name)})", token)
    kind = static_type(expr.tree)
    if kind in ("int", "str"):
        raise _refuse(
            expr,
            f"the expression is always {_TYPE_NAMES[kind]}, never a Boolean, so no record would pass (compare "
            "it, e.g. LENGTH(x) > 3 or x = 'abc')",
            _first_token(expr.tree),
        )
