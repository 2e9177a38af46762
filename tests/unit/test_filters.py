"""Filters, pure: every Subscriptions API dialect, CESQL's semantics (types, casts, functions, error
rules, precedence) as tables, validation answers with their dotted field, and the worker's lazy
record attributes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ferry import filters
from ferry.errors import ValidationError
from ferry.filters.attributes import RecordAttributes, rfc3339_ms
from ferry.filters.cesql import CesqlParseError, compile
from ferry.subscription import from_trusted
from ferry.subscription import parse as parse_subscription
from ferry.worker.push import CE_TYPE, DEFAULT_CONTENT_TYPE
from ferry.worker.push import rfc3339_ms as push_time

EVENT = {"id": "orders/0/7", "source": "/ferry/default/s", "type": "dev.ferry.kafka.record", "kafkatopic": "orders"}


@pytest.mark.parametrize(
    ("doc", "attrs", "passes"),
    [
        ({"exact": {"type": "order.created"}}, {"type": "order.created"}, True),
        ({"exact": {"type": "order.created"}}, {"type": "Order.created"}, False),
        ({"exact": {"type": "order.created"}}, {}, False),
        ({"prefix": {"partitionkey": "eu-"}}, {"partitionkey": "eu-42"}, True),
        ({"prefix": {"partitionkey": "eu-"}}, {"partitionkey": "us-42"}, False),
        ({"suffix": {"kafkatopic": ".audit"}}, {"kafkatopic": "billing.audit"}, True),
        ({"suffix": {"kafkatopic": ".audit"}}, {"kafkatopic": "billing"}, False),
        ({"all": [{"prefix": {"a": "x"}}, {"suffix": {"a": "z"}}]}, {"a": "xyz"}, True),
        ({"all": [{"prefix": {"a": "x"}}, {"suffix": {"a": "q"}}]}, {"a": "xyz"}, False),
        ({"any": [{"exact": {"a": "1"}}, {"exact": {"a": "2"}}]}, {"a": "2"}, True),
        ({"any": [{"exact": {"a": "1"}}, {"exact": {"a": "2"}}]}, {"a": "3"}, False),
        ({"not": {"exact": {"a": "1"}}}, {"a": "2"}, True),
        ({"not": {"exact": {"a": "1"}}}, {"a": "1"}, False),
        ({"sql": "a = 'x' AND LENGTH(b) > 2"}, {"a": "x", "b": "abc"}, True),
        ({"sql": "a = 'x' AND LENGTH(b) > 2"}, {"a": "x", "b": "ab"}, False),
        ({"sql": "missing = 'x'"}, {"a": "x"}, False),  # an evaluation error rejects
        ({"sql": "region"}, {"region": "true"}, False),  # a non-Boolean result (a String) rejects
        ({"not": {"sql": "missing = 'x'"}}, {}, False),  # an error is not negated into a pass
    ],
)
def test_dialects(doc: Any, attrs: dict[str, str], passes: bool) -> None:
    assert filters.parse(doc).matches(attrs)[0] is passes


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ("exact", "filter"),
        ({}, "filter"),
        ({"exact": {"a": "1"}, "prefix": {"a": "1"}}, "filter"),
        ({"equals": {"a": "1"}}, "filter"),
        ({"exact": {"a": "1", "b": "2"}}, "filter.exact"),
        ({"exact": {"A": "1"}}, "filter.exact.A"),
        ({"prefix": {"a": 1}}, "filter.prefix.a"),
        ({"all": []}, "filter.all"),
        ({"any": [{"exact": {"a": "1"}}, {"sql": "a ="}]}, "filter.any[1].sql"),
        ({"not": {"sql": ""}}, "filter.not.sql"),
        ({"sql": "NOPE(a)"}, "filter.sql"),
        ({"any": [{"sql": " OR ".join(["a = 'x'"] * 1000)}]}, "filter.any[0].sql"),
    ],
)
def test_invalid_filters_name_their_field(doc: Any, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        filters.parse(doc)
    assert e.value.field == field


LEAF = {"exact": {"a": "b"}}


def nested(levels: int, dialect: str) -> Any:
    """A filter ``levels`` deep: the leaf inside ``levels - 1`` of ``dialect``, the deepest branch
    last in each list (beside a leaf)."""
    doc: Any = LEAF
    for _ in range(levels - 1):
        doc = {"not": doc} if dialect == "not" else {dialect: [LEAF, doc]}
    return doc


@pytest.mark.parametrize("dialect", ["not", "all", "any"])
def test_filters_nest_at_most_16_levels(dialect: str) -> None:
    assert filters.MAX_DEPTH == 16
    assert filters.parse(LEAF)  # level 1
    filters.parse(nested(16, dialect))
    for levels in (17, 18, 40):
        with pytest.raises(ValidationError) as e:
            filters.parse(nested(levels, dialect))
        step = ".not" if dialect == "not" else f".{dialect}[1]"
        # the part at level 17 on the deepest branch; at 17 levels both parts are leaves: the first
        last = f".{dialect}[0]" if dialect != "not" and levels == 17 else step
        assert e.value.field == "filter" + step * 15 + last
        assert e.value.message.startswith("filters nest at most 16 levels deep")
        assert "at level 17" in e.value.message


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"any": [nested(16, "all"), LEAF]}, "filter.any[0]" + ".all[1]" * 14 + ".all[0]"),
        ({"all": [LEAF, nested(16, "not"), nested(15, "any")]}, "filter.all[1]" + ".not" * 15),
        ({"not": {"any": [LEAF, nested(15, "not"), LEAF]}}, "filter.not.any[1]" + ".not" * 14),
    ],
)
def test_the_too_deep_field_is_the_part_at_level_17_on_the_deepest_branch(doc: Any, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        filters.parse(doc)
    assert e.value.field == field


# Valid CESQL that could never pass a record is refused when saved, with what to change.
@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("LENGTH(a, b) = 1", "wrong number of arguments for LENGTH (2; it takes 1 argument) at line 1, column 1"),
        ("SUBSTRING(x, 1, 2, 3) = 'a'", "wrong number of arguments for SUBSTRING (4; it takes 2 or 3 arguments)"),
        ("x = 'y' AND\n  left(a) = LEFT()", "wrong number of arguments for LEFT (1; it takes 2 arguments) at line 2"),
        ("CONCAT_WS() = ''", "wrong number of arguments for CONCAT_WS (0; it takes at least 1 argument)"),
        ("ABS() = 0", "wrong number of arguments for ABS (0; it takes 1 argument)"),
        ("NOPE(a) = 1", "unknown function NOPE; CESQL has ABS, BOOL, CONCAT, CONCAT_WS, INT, IS_BOOL, IS_INT"),
        ("5", "the expression is always an Integer, never a Boolean, so no record would pass (compare it"),
        ("'abc'", "the expression is always a String, never a Boolean"),
        ("'true'", "the expression is always a String, never a Boolean"),
        ("(-5)", "the expression is always an Integer, never a Boolean"),
        ("a + 1", "the expression is always an Integer, never a Boolean"),
        ("LENGTH(a)", "the expression is always an Integer, never a Boolean"),
        ("lower(a)", "the expression is always a String, never a Boolean"),
    ],
)
def test_cesql_that_could_never_pass_is_refused_when_saved(source: str, message: str) -> None:
    with pytest.raises(ValidationError) as e:
        filters.parse({"any": [{"exact": {"a": "b"}}, {"sql": source}]})
    assert e.value.field == "filter.any[1].sql"
    assert e.value.message.startswith(message) and "^" in e.value.message


@pytest.mark.parametrize(
    "source",
    [
        "CONCAT() = ''",  # every arity CESQL defines
        "CONCAT(a, b, c, d) = 'x'",
        "CONCAT_WS(',') = ''",
        "SUBSTRING(a, 1) = 'x' OR SUBSTRING(a, 1, 2) = 'x'",
        "a",  # an attribute's value may be a Boolean
        "BOOL(a)",
        "IS_INT(a)",
        "TRUE",
        "NOT 5",  # a failed cast: an evaluation error, false for each record
        "a = 1 / 0",  # a math error: false for each record
    ],
)
def test_what_may_be_true_or_fails_only_when_evaluated_is_accepted(source: str) -> None:
    filters.parse({"sql": source})


@pytest.mark.parametrize(
    ("doc", "attrs"),
    [
        ({"sql": "'not a bool'"}, {}),
        ({"sql": "LENGTH(a, b) = 1"}, {"a": "x", "b": "y"}),
        (nested(17, "not"), {"a": "c"}),  # 17 levels, accepted before 16 were enforced
    ],
)
def test_a_stored_filter_loads_with_the_rules_it_was_saved_under(doc: Any, attrs: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        filters.parse(doc)
    assert filters.parse(doc, stored=True).matches(attrs)[0] is False
    sub = {"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/hook"}, "filter": doc}
    assert from_trusted(sub).filter == doc


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'it''s'", "it's"),  # a doubled delimiter, as in the specification's lexer
        (r"'it\'s'", "it's"),  # a backslash-escaped one, as in its EBNF
        ('"say ""hi"""', 'say "hi"'),
        (r"'x\\'''", r"x\\'"),  # a backslash pair, then a doubled quote
        (r"'\''''", "''"),
        (r"'a\%b'", r"a\%b"),  # other backslashes are kept (LIKE's escapes)
    ],
)
def test_string_literals_unescape_as_the_lexer_reads_them(literal: str, value: str) -> None:
    assert compile(literal).evaluate({}) == (value, [])
    assert filters.parse({"sql": f"a = {literal}"}).matches({"a": value}) == (True, False)


def test_the_documented_error_is_the_real_answer() -> None:
    page = (Path(__file__).parents[2] / "docs" / "filters.md").read_text()
    shown = json.loads(page.split("## Validation", 1)[1].split("```json\n", 1)[1].split("```", 1)[0])
    with pytest.raises(ValidationError) as e:
        filters.parse({"any": [{"exact": {"region": "us"}}, {"sql": "region = 'eu' )"}]})
    assert shown == {"error": e.value.message, "field": e.value.field}  # as the API answers (ferry.portal.http)


def test_an_expression_is_at_most_4096_characters() -> None:
    long_in = "a IN (" + ", ".join(["'x'"] * 818) + ") "
    assert len(long_in) == 4096
    filters.parse({"sql": long_in})
    with pytest.raises(ValidationError) as e:
        filters.parse({"sql": long_in + " "})
    assert (e.value.field, e.value.message) == (
        "filter.sql",
        "at most 4096 characters, got 4097: split it into sql filters under all or any",
    )


def test_a_parse_error_says_where() -> None:
    with pytest.raises(CesqlParseError) as e:
        compile("type = 'x' AND\n  (source LIKE 3")
    assert (e.value.line, e.value.column) == (2, 16) and "^" in str(e.value)


def test_the_subscription_document_carries_its_filter() -> None:
    doc = {"name": "s", "topics": ["t"], "endpoint": {"url": "http://e/hook"}, "filter": {"exact": {"type": "x"}}}
    sub = parse_subscription(doc)
    assert sub.filter == {"exact": {"type": "x"}} and sub.to_doc()["filter"] == {"exact": {"type": "x"}}
    assert "filter" not in parse_subscription({**doc, "filter": None}).to_doc()
    with pytest.raises(ValidationError) as e:
        parse_subscription({**doc, "filter": {"sql": "type = "}})
    assert e.value.field == "filter.sql"


@pytest.mark.parametrize(
    ("expression", "value", "errors"),
    [
        # literals, case
        ("TRUE", True, []),
        ("fAlSe", False, []),
        ("'it''s'", "it's", []),
        ('"say \\"hi\\""', 'say "hi"', []),
        ("-2147483648", -2147483648, []),
        # arithmetic: precedence, truncation, casts, errors
        ("4 * 2 + 4 / 2", 10, []),
        ("-7 / 2", -3, []),
        ("-7 % 3", -1, []),
        ("5 / 0", 0, ["math"]),
        ("'5' + 3", 8, []),
        ("5 + TRUE", 6, []),
        ("'five' + 1", 0, ["cast"]),
        ("2147483647 + 1", -2147483648, []),
        ("--10", 10, []),
        ("-TRUE", -1, []),
        # comparison: = casts the left operand to the right one's type
        ("'TRUE' = true", True, []),
        ("true = 'TRUE'", False, []),
        ("1 <> 2", True, []),
        ("'10' > 9", True, []),
        # logic: short circuit, errors, no implicit Integer → Boolean
        ("false AND (1 / 0 = 0)", False, []),
        ("true AND (1 != 1 / 0)", False, ["math"]),
        ("true OR (1 / 0 = 0)", True, []),
        ("TRUE XOR TRUE", False, []),
        ("NOT 'false'", True, []),
        ("NOT 10", True, ["cast"]),
        # LIKE with escapes, on casts
        ("'a%b' LIKE 'a\\%b'", True, []),
        ("'axb' LIKE 'a\\%b'", False, []),
        ("'abc' LIKE 'a_c'", True, []),
        ("2344 LIKE '23%'", True, []),
        ("'ab' NOT LIKE 'a%'", False, []),
        # IN casts the set to the left operand's type
        ("1 IN ('1', '2')", True, []),
        ("'true' IN (TRUE, 'x')", True, []),
        ("3 NOT IN (1, 2)", True, []),
        # attributes
        ("kafkatopic", "orders", []),
        ("EXISTS ID", True, []),
        ("EXISTS subject", False, []),
        ("subject", False, ["missingAttribute"]),
        ("subject * 5", 0, ["missingAttribute"]),
        ("1 / subject", 0, ["missingAttribute"]),
        # functions
        ("CONCAT_WS(',', 'a', 'b')", "a,b", []),
        ("CONCAT()", "", []),
        ("SUBSTRING('Sakila', -5, 3)", "aki", []),
        ("SUBSTRING('abcdef', 10)", "", ["functionEvaluation"]),
        ("LEFT('abc', -2)", "abc", ["functionEvaluation"]),
        ("RIGHT('abc', 2)", "bc", []),
        ("ABS(-2147483648)", 2147483647, ["math"]),
        ("INT('x')", 0, ["cast"]),
        ("BOOL(100)", True, []),
        ("STRING(FALSE)", "false", []),
        ("TRIM('  a b  ')", "a b", []),
        ("lower('AbC')", "abc", []),
        ("NOPE(1)", False, ["missingFunction"]),
        ("CONCAT_WS()", False, ["missingFunction"]),
    ],
)
def test_cesql(expression: str, value: Any, errors: list[str]) -> None:
    got, errs = compile(expression).evaluate(EVENT)
    assert (got, type(got), errs) == (value, type(value), errors)


@pytest.mark.parametrize("expression", ["ABC(", "x LIKE 123", "1 IN ()", "a = = b", "2147483648", "'open"])
def test_parse_errors(expression: str) -> None:
    with pytest.raises(CesqlParseError):
        compile(expression)


# A keyword followed by "(" is the keyword, never a function name (NOT (x) was once a call to NOT).
@pytest.mark.parametrize(
    ("source", "attrs", "passes"),
    [
        ("NOT (kafkapartition IN (0, 1))", {"kafkapartition": 2}, True),
        ("NOT (kafkapartition IN (0, 1))", {"kafkapartition": 1}, False),
        ("NOT (a = 'b')", {"a": "c"}, True),
        ("NOT (a = 'b')", {"a": "b"}, False),
        ("NOT(TRUE)", {}, False),
        ("NOT(FALSE)", {}, True),
        ("not (a = 'b')", {"a": "c"}, True),
        ("Not(a = 'b')", {"a": "b"}, False),
        ("NOT\n(a = 'b')", {"a": "c"}, True),
        ("x = 'y' AND NOT (a = 'b')", {"x": "y", "a": "c"}, True),
        ("x = 'y' AND NOT (a = 'b')", {"x": "y", "a": "b"}, False),
        ("x = 'y' AND(a = 'b')", {"x": "y", "a": "b"}, True),
        ("x = 'n' OR(a = 'b')", {"x": "y", "a": "b"}, True),
        ("x = 'y' XOR(a = 'b')", {"x": "y", "a": "b"}, False),
        ("a IN('b', 'c')", {"a": "c"}, True),
        ("a NOT IN('b', 'c')", {"a": "c"}, False),
        ("INT(n) = 3", {"n": "3"}, True),  # a function whose name starts with a keyword
    ],
)
def test_a_keyword_before_a_parenthesis_is_the_keyword(source: str, attrs: dict[str, Any], passes: bool) -> None:
    assert filters.parse({"sql": source}).matches(attrs) == (passes, False)


@pytest.mark.parametrize(
    ("source", "column"),
    [("EXISTS(a)", 7), ("TRUE(1)", 5), ("false (1)", 7), ("a LIKE('b')", 7), ("a NOT LIKE ('b')", 12)],
)
def test_a_keyword_is_no_function_name(source: str, column: int) -> None:
    with pytest.raises(ValidationError) as e:
        filters.parse({"sql": source})
    assert e.value.field == "filter.sql"
    assert e.value.message.startswith(f"unexpected '(' at line 1, column {column}:")


def test_record_attributes_are_those_of_the_push() -> None:
    headers = [("Region", b"eu"), ("content-type", b"application/json"), ("x-y", b"no")]
    a = RecordAttributes("orders", 3, 17, b"eu/42", headers, 0, "default", "billing")
    assert a["id"] == "orders/3/17" and a["source"] == "/ferry/default/billing"
    assert a["partitionkey"] == "eu%2F42" and a["kafkaoffset"] == "17" and a["time"] == "1970-01-01T00:00:00.000Z"
    assert a["region"] == "eu" and a["datacontenttype"] == "application/json"
    assert "x-y" not in a and a.get("subject") is None and "region" in a
    assert filters.parse({"sql": "region = 'eu' AND kafkapartition = 3"}).matches(a) == (True, False)


def test_the_attribute_view_agrees_with_the_push_path() -> None:
    from ferry.filters import attributes

    assert (attributes.CE_TYPE, attributes.DEFAULT_CONTENT_TYPE) == (CE_TYPE, DEFAULT_CONTENT_TYPE)
    for ts in (0, 1_795_552_317_864, 999, 1_000):
        assert rfc3339_ms(ts) == push_time(ts)
