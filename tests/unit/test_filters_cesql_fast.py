"""CESQL filter verdicts from the generated function (ferry.filters.cesql_codegen) agree with the
closure evaluator's value and errors: a verdict passes only for the Boolean true without errors and
is erred exactly when the evaluator reports an error. Tables for each specialised path (attribute
values of every type, literal casts folded or left to fail, LIKE shapes, IN over literals, the
inlined functions, the fallback for deep nesting) and a seeded random sweep over the grammar."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ferry import filters
from ferry.filters import cesql, cesql_codegen
from ferry.filters.attributes import RecordAttributes
from ferry.filters.cesql import compile


class Odd:
    """An attribute value that is no CESQL type: seen as its string."""

    def __str__(self) -> str:
        return "42"


EVENTS: list[dict[str, Any]] = [
    {"s": "abc", "n": "5", "b": "true", "i": 7, "t": True, "f": False, "o": Odd(), "e": "", "x": "a%b_c"},
    {"s": "TRUE", "n": " 12 ", "b": "no", "i": -2147483648, "t": "false", "f": 0, "o": 3.5, "e": "0"},
    {"s": "5", "n": "+7", "b": "FALSE", "i": 2147483647, "t": 1, "f": "x", "e": "a\nb"},
    {"s": "0123456789", "n": "٣", "b": True, "i": "1_0", "t": "TRUE", "o": b"by", "e": "-0"},
    {},
]


def verdict_of_evaluate(source: str, event: Any) -> tuple[bool, bool]:
    value, errors = compile(source).evaluate(event)
    return (False, True) if errors else (value is True, False)


@pytest.mark.parametrize(
    ("source", "event", "verdict"),
    [
        # an attribute compared with a String: the fast path, and values of every other type
        ("s = 'abc'", EVENTS[0], (True, False)),
        ("s = 'abc'", {"s": "abd"}, (False, False)),
        ("s = 'abc'", {}, (False, True)),  # missing
        ("t = 'true'", {"t": True}, (True, False)),  # Boolean → String
        ("i = '7'", {"i": 7}, (True, False)),  # Integer → String
        ("o = '42'", {"o": Odd()}, (True, False)),  # no CESQL type → its string
        # an attribute cast to Integer: a digit String, signs and blanks, non-ASCII digits, types
        ("n < 6", {"n": "5"}, (True, False)),
        ("n < 6", {"n": " 5 "}, (True, False)),
        ("n < 6", {"n": "-5"}, (True, False)),
        ("n < 6", {"n": "٣"}, (False, True)),
        ("n < 6", {"n": "1_0"}, (False, True)),
        ("n < 6", {"n": "2147483648"}, (False, True)),
        ("n < 6", {"n": "0000000005"}, (True, False)),
        ("n < 6", {"n": 5}, (True, False)),
        ("n < 6", {"n": True}, (True, False)),
        ("n < 6", {"n": 2**40}, (False, False)),  # an Integer from the event is taken as it is
        ("n < 6", {}, (False, True)),
        # an attribute cast to Boolean
        ("b AND TRUE", {"b": True}, (True, False)),
        ("b AND TRUE", {"b": "TRUE"}, (True, False)),
        ("b AND TRUE", {"b": 1}, (False, True)),
        ("NOT b", {"b": "x"}, (False, True)),
        # = casts the left operand to the type of the right one, also when that is an attribute
        ("'5' = i", {"i": 5}, (True, False)),
        ("'5' = i", {"i": "5"}, (True, False)),
        ("'x' = i", {"i": 5}, (False, True)),
        ("TRUE = s", {"s": "TRUE"}, (False, False)),
        ("'TRUE' = t", {"t": True}, (True, False)),
        # literals cast at compile time, or left to fail when evaluated
        ("'5' + 3 = 8", {}, (True, False)),
        ("FALSE AND 'x' + 1 = 1", {}, (False, False)),
        ("TRUE AND 'x' + 1 = 1", {}, (False, True)),
        ("'x' > 1", {}, (False, True)),
        ("10", {}, (False, False)),  # a non-Boolean result
        ("'TRUE'", {}, (False, False)),
        ("t", {"t": True}, (True, False)),
        ("t", {"t": "true"}, (False, False)),
        # arithmetic: overflow wraps, division truncates, by zero errs
        ("i + 1 = -2147483648", {"i": 2147483647}, (True, False)),
        ("-i = i", {"i": -2147483648}, (True, False)),
        ("i / -1 = i", {"i": -2147483648}, (True, False)),
        ("-7 % i = -1", {"i": 3}, (True, False)),
        ("1 / i = 0", {"i": 0}, (False, True)),
        ("1 % i = 0", {"i": "0"}, (False, True)),
        # LIKE: equal, prefix, suffix, infix, and the rest through the regular expression
        ("s LIKE 'abc'", EVENTS[0], (True, False)),
        ("s LIKE 'ab%'", EVENTS[0], (True, False)),
        ("s LIKE '%bc'", EVENTS[0], (True, False)),
        ("s LIKE '%b%'", EVENTS[0], (True, False)),
        ("s LIKE '%'", {"s": ""}, (True, False)),
        ("s LIKE ''", {"s": ""}, (True, False)),
        ("s LIKE 'a_c'", EVENTS[0], (True, False)),
        ("s LIKE 'a%%'", {"s": "a\nz"}, (True, False)),
        ("x LIKE 'a\\%b\\_c'", EVENTS[0], (True, False)),
        ("x LIKE 'a\\%%'", EVENTS[0], (True, False)),
        ("s LIKE 'a\\c'", {"s": "a\\c"}, (True, False)),
        ("s NOT LIKE 'ab%'", EVENTS[0], (False, False)),
        ("t LIKE 'tr%'", {"t": True}, (True, False)),
        ("s LIKE 'ab%'", {}, (False, True)),
        # IN over literals: a set for a String, each literal cast otherwise; and over expressions
        ("s IN ('x', 'abc')", EVENTS[0], (True, False)),
        ("s IN ('x', 1)", {"s": "1"}, (True, False)),
        ("i IN ('x', 7)", {"i": 7}, (False, True)),  # 'x' is no Integer, and comes first
        ("i IN (7, 'x')", {"i": 7}, (True, False)),  # found before the bad cast
        ("t IN ('TRUE')", {"t": True}, (True, False)),
        ("5 IN ('5', 6)", {}, (True, False)),
        ("5 IN ('x', 5)", {}, (False, True)),
        ("5 IN (5, 'x')", {}, (True, False)),
        ("TRUE IN (1)", {}, (False, True)),
        ("s IN (i, 'abc')", {"s": "7", "i": 7}, (True, False)),
        ("s IN ('abc', missing)", EVENTS[0], (True, False)),
        ("s IN ('x', missing)", EVENTS[0], (False, True)),
        ("i IN (s, 1)", {"i": 1, "s": "y"}, (False, True)),
        ("i NOT IN (1, 2)", {"i": 3}, (True, False)),
        # the inlined functions, the generic ones, and missing ones
        ("LENGTH(i) = 2", {"i": 10}, (True, False)),
        ("LOWER(t) = 'true'", {"t": True}, (True, False)),
        ("UPPER(s) || 'x'", {}, None),  # a parse error: || is no CESQL operator
        ("CONCAT(s, i, t) = 'abc7true'", {"s": "abc", "i": 7, "t": True}, (True, False)),
        ("CONCAT_WS('-', i) = '7'", {"i": 7}, (True, False)),
        ("CONCAT_WS(s) = ''", {"s": "-"}, (True, False)),
        ("TRIM(s) = 'a'", {"s": " a "}, (True, False)),
        ("INT(s) = 5", {"s": "5"}, (True, False)),
        ("INT(s) = 5", {"s": "x"}, (False, True)),
        ("STRING(t) = 'false'", {"t": False}, (True, False)),
        ("IS_STRING(i)", {"i": 7}, (False, False)),
        ("IS_STRING(o)", {"o": Odd()}, (True, False)),
        ("IS_INT(s)", {"s": " 7"}, (True, False)),
        ("BOOL(i)", {"i": 3}, (True, False)),
        ("ABS(i) = 2147483647", {"i": -2147483648}, (False, True)),
        ("LEFT(s, i) = s", {"s": "abc", "i": -1}, (False, True)),
        ("SUBSTRING(s, 2, 1) = 'b'", EVENTS[0], (True, False)),
        ("NOPE(s)", EVENTS[0], (False, True)),
        ("LENGTH(s, s) = 3", EVENTS[0], (False, True)),
        # EXISTS and logic
        ("EXISTS s AND NOT EXISTS z", EVENTS[0], (True, False)),
        ("FALSE AND missing", {}, (False, False)),
        ("TRUE OR missing", {}, (True, False)),
        ("TRUE XOR missing", {}, (False, True)),
        ("t XOR f", {"t": True, "f": "false"}, (True, False)),
    ],
)
def test_specialised_paths(source: str, event: dict[str, Any], verdict: tuple[bool, bool] | None) -> None:
    if verdict is None:
        with pytest.raises(Exception, match="unexpected"):
            compile(source)
        return
    assert compile(source).matches(event) == verdict == verdict_of_evaluate(source, event)


def test_the_worker_attribute_view_takes_the_string_paths() -> None:
    headers = [("region", b"eu"), ("Count", b"12")]
    attrs = RecordAttributes("orders", 3, 17, b"customer-42", headers, 0, "default", "s")
    source = "region = 'eu' AND kafkapartition < 6 AND LENGTH(partitionkey) > 3 AND count + 1 = 13"
    assert compile(source).matches(attrs) == (True, False)
    assert compile("kafkapartition IN (3, 4) AND partitionkey LIKE 'customer-%'").matches(attrs) == (True, False)
    assert compile("subject = 'x'").matches(attrs) == (False, True)


def test_a_long_and_chain_is_generated_flat() -> None:
    source = " AND ".join(["s = 'abc'"] * 190)
    assert cesql_codegen.matcher(cesql._parser().parse(source)) is not None
    assert compile(source).matches(EVENTS[0]) == (True, False) and compile(source).matches({}) == (False, True)


def test_an_expression_too_deep_to_generate_falls_back_to_the_closures() -> None:
    source = " + ".join(["i"] * 150) + " = 1050"
    assert cesql_codegen.matcher(cesql._parser().parse(source)) is None
    expr = compile(source)
    assert expr.matches(EVENTS[0]) == (True, False) and expr.matches({}) == (False, True)
    assert expr.matches({"i": "x"}) == (False, True) and expr.matches({"i": 1}) == (False, False)


DEEP = [
    " OR ".join(["s = 'x'"] * 1000),
    " + ".join(["i"] * 300) + " = 1",
    "NOT " * 250 + "TRUE",
    "UPPER(" * 250 + "s" + ")" * 250 + " = 'ABC'",
    "1 = " + " = ".join(["1"] * 250),
]


@pytest.mark.parametrize("source", DEEP)
def test_an_expression_nested_beyond_the_bound_is_refused_where_it_is_deepest(source: str) -> None:
    with pytest.raises(cesql.CesqlParseError, match=r"nests \d+ levels deep, at most 200") as e:
        compile(source)
    assert e.value.line == 1 and e.value.column > 1


AT_THE_BOUND = [
    " OR ".join(["s = 'x'"] * 199),
    " AND ".join(["s = 'abc'"] * 199),
    " + ".join(["i"] * 199) + " = 1393",
    "NOT " * 199 + "FALSE",
    "-" * 198 + "7 = 7",
    "UPPER(" * 198 + "s" + ")" * 198 + " = 'ABC'",
]


@pytest.mark.parametrize("source", AT_THE_BOUND)
def test_what_the_bound_admits_evaluates_on_a_worker_sized_stack(source: str) -> None:
    import sys

    expr = compile(source)
    closures = cesql._closure_matches(expr._root)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)  # a worker evaluates ~50 frames deep; Python allows 1,000
    try:
        verdicts = {expr.matches(EVENTS[0]), closures(EVENTS[0]), expr.matches({})}
    finally:
        sys.setrecursionlimit(limit)
    assert verdicts <= {(True, False), (False, False), (False, True)}
    assert expr.matches(EVENTS[0]) == closures(EVENTS[0])


# --- a seeded random sweep over the grammar ---------------------------------------------------

LEAVES = ["0", "1", "-1", "7", "2147483647", "-2147483648", "TRUE", "false", "''", "'abc'", "'5'", "' 7 '"]
LEAVES += ["'true'", "'FALSE'", "'+3'", "'x%'", "s", "n", "b", "i", "t", "f", "o", "e", "x", "missing"]
BINARY = ["AND", "OR", "XOR", "=", "<>", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"]
PATTERNS = ["'abc'", "'a%'", "'%c'", "'%b%'", "'%'", "''", "'a_c'", "'5%'", "'%\\%%'", "'tr%'", "'_'", "'%1%'"]
CALLS = ["LENGTH", "CONCAT", "CONCAT_WS", "LOWER", "UPPER", "TRIM", "LEFT", "RIGHT", "SUBSTRING", "ABS", "INT"]
CALLS += ["BOOL", "STRING", "IS_INT", "IS_BOOL", "IS_STRING", "NOPE"]


def random_expression(rng: random.Random, depth: int, leaves: list[str] = LEAVES) -> str:
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(leaves)
    kind = rng.randrange(8)
    sub = lambda: random_expression(rng, depth - 1, leaves)  # noqa: E731
    if kind <= 2:
        return f"({sub()} {rng.choice(BINARY)} {sub()})"
    if kind == 3:
        return f"{rng.choice(['NOT ', '-'])}({sub()})"
    if kind == 4:
        return f"({sub()}{rng.choice([' ', ' NOT '])}LIKE {rng.choice(PATTERNS)})"
    if kind == 5:
        items = ", ".join(sub() if rng.random() < 0.3 else rng.choice(LEAVES) for _ in range(rng.randint(1, 4)))
        return f"({sub()}{rng.choice([' ', ' NOT '])}IN ({items}))"
    if kind == 6:
        args = ", ".join(sub() for _ in range(rng.randint(0, 3)))
        return f"{rng.choice(CALLS)}({args})"
    return f"EXISTS {rng.choice(['s', 'missing', 'o'])}"


def test_generated_verdicts_agree_with_the_closure_evaluator() -> None:
    rng = random.Random(20240611)
    sources = [random_expression(rng, rng.randint(1, 5)) for _ in range(3000)]
    checked = 0
    for source in sources:
        expr = compile(source)
        for event in EVENTS:
            value, errors = expr.evaluate(event)
            expected = (False, True) if errors else (value is True, False)
            assert expr.matches(event) == expected, (source, event)
            checked += 1
    assert checked == 3000 * len(EVENTS)


VIEW_SOURCES = [
    "region = 'eu'",
    "kafkapartition < 6",
    "LENGTH(partitionkey) > 3",
    "type <> 'x'",
    "partitionkey = 'hk'",
    "datacontenttype = 'application/json'",
    "kafkaoffset = 17",
    "id LIKE 'orders/%'",
    "source = '/ferry/default/s'",
    "time > '2026'",
    "ferryattempt = 1",
    "specversion = '1.0'",
    "kafkapartition = 99",
    "x = 'y'",
    "missing = 'x'",
    "EXISTS region AND UPPER(region) IN ('EU', 'US')",
    "EXISTS partitionkey OR kafkatopic = 'o.2'",
]
VIEW_HEADERS = [
    ("region", b"eu"),
    ("Region", b"us"),
    ("REGION", None),
    ("partitionkey", b"hk"),
    ("type", b"t"),
    ("content-type", b"application/json"),
    ("x", b"\xff\xfe"),
    ("kafkapartition", b"99"),
    ("trace-id", b"abc"),
]


def test_the_record_view_reads_each_attribute_as_its_get_does() -> None:
    """The generated function reads the worker's record view through one reader per name; on
    views of every kind (own attributes, headers that shadow none or are shadowed, names in any
    case, headers without a value, more headers than a scan covers) its verdict is the one the
    same function gives on a plain dict of the view's attributes, and the closure evaluator's."""
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        headers = rng.sample(VIEW_HEADERS, rng.randint(0, len(VIEW_HEADERS)))
        headers += [(f"pad{i}", b"p") for i in range(rng.choice([0, 0, 9]))]  # beyond the scan: a dict
        key = rng.choice([None, b"k1", b"customer-12", b"a b/\xff"])
        view = RecordAttributes(rng.choice(["orders", "o.2"]), rng.randrange(10), 17, key, headers, 0, "default", "s")
        plain = dict(view)
        for source in VIEW_SOURCES:
            expr = compile(source)
            expected = verdict_of_evaluate(source, view)
            assert expr.matches(view) == expr.matches(plain) == expected, (source, headers, key)
            checked += 1
        for dialect in ("exact", "prefix", "suffix"):  # the dialects read through the same readers
            for name, value in (("region", "eu"), ("partitionkey", "hk"), ("type", "dev"), ("x", "\ufffd")):
                f = filters.parse({dialect: {name: value}})
                assert f.matches(view) == f.matches(plain), (dialect, name, headers, key)
    assert checked == 400 * len(VIEW_SOURCES)
