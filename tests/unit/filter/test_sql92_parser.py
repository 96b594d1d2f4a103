"""The SQL92 grammar: every construct RocketMQ's SelectorParser.jj accepts, the checks it makes
while building the tree, and the position of each parse error."""

from __future__ import annotations

import pytest

from spark_mq.filter.sql92 import (
    FALSE,
    NULL,
    TRUE,
    And,
    BoolCast,
    Compare,
    Const,
    FilterParseError,
    In,
    IsNull,
    Kind,
    Neg,
    Not,
    Or,
    Prop,
    StringTest,
    parse,
    properties_of,
)

a, b = Prop("a"), Prop("b")


def c(value, kind=None):
    kinds = {str: Kind.STR, float: Kind.DOUBLE}
    return Const(value, kind or kinds.get(type(value), Kind.INT))


@pytest.mark.parametrize("text,tree", [
    ("a = 1", Compare("=", a, c(1))),
    ("a <> 'x'", Not(Compare("=", a, c("x")))),
    ("a < 1.5", Compare("<", a, c(1.5))),
    ("a <= 2147483648", Compare("<=", a, c(2147483648, Kind.LONG))),
    ("a > 5L", Compare(">", a, c(5))),
    ("a >= -3", Compare(">=", a, Neg(c(3)))),
    ("a > +3", Compare(">", a, c(3))),
    ("a > .5e1", Compare(">", a, c(5.0))),
    ("a > 5E2", Compare(">", a, c(500.0))),
    ("a BETWEEN 1 AND 3", And(Compare(">=", a, c(1)), Compare("<=", a, c(3)))),
    ("a NOT BETWEEN 1 AND 3", Or(Compare("<", a, c(1)), Compare(">", a, c(3)))),
    ("a IN ('x', 'it''s')", In(a, ("x", "it's"), False)),
    ("a not in ('x')", In(a, ("x",), True)),
    ("a IS NULL", IsNull(a)),
    ("a IS NOT NULL", Not(IsNull(a))),
    ("a CONTAINS 'x'", StringTest("CONTAINS", a, "x", False)),
    ("a NOT CONTAINS 'x'", StringTest("CONTAINS", a, "x", True)),
    ("a STARTSWITH 'x'", StringTest("STARTSWITH", a, "x", False)),
    ("a NOT STARTSWITH 'x'", StringTest("STARTSWITH", a, "x", True)),
    ("a ENDSWITH 'x'", StringTest("ENDSWITH", a, "x", False)),
    ("a NOT ENDSWITH 'x'", StringTest("ENDSWITH", a, "x", True)),
    ("TRUE", TRUE),
    ("false OR NULL", Or(FALSE, NULL)),
    ("a", BoolCast(a)),
    ("NOT a", Not(BoolCast(a))),
    ("a = 1 OR b = 2 AND a = 3", Or(Compare("=", a, c(1)), And(Compare("=", b, c(2)), Compare("=", a, c(3))))),
    ("(a = 1 OR b = 2) AND a = 3", And(Or(Compare("=", a, c(1)), Compare("=", b, c(2))), Compare("=", a, c(3)))),
    ("TAGS = 'x' -- comment\n", Compare("=", Prop("TAGS"), c("x"))),
    ("/* note */ a = 'x'", Compare("=", a, c("x"))),
    ("a = TRUE", Compare("=", a, TRUE)),
    ("$x_1 = 1", Compare("=", Prop("$x_1"), c(1))),
    ("android = 1", Compare("=", Prop("android"), c(1))),  # a keyword's prefix is an identifier
])
def test_every_construct(text, tree):
    assert parse(text) == tree


@pytest.mark.parametrize("text,message,line,column", [
    ("a >", "Encountered \"<EOF>\"", 1, 4),
    ("a = 1 AND", "Encountered \"<EOF>\"", 1, 10),
    ("a IN 'x'", "was expecting", 1, 6),
    ("a = 'x' b", "Encountered \"b\"", 1, 9),
    ("a = 1 AND\n  b ! 2", "Lexical error", 2, 5),
    ("a = 'open", "Lexical error", 1, 5),
    ("a = NULL", "'NULL' cannot be compared", 1, 3),
    ("TRUE = 1", "'TRUE' cannot be compared with '1'", 1, 8),
    ("a > 'x'", "Value ''x'' cannot be compared", 1, 5),
    ("a < TRUE", "Value 'TRUE' cannot be compared", 1, 5),
    ("(a = 1) > 2", "cannot be compared", 1, 1),
    ("'x' IN ('x')", "Expected a property for In expression", 1, 1),
    ("5", "Expression will not result in a boolean value: 5", 1, 1),
    ("a = 1 AND 'x'", "will not result in a boolean value", 1, 11),
    ("-a", "will not result in a boolean value", 1, 1),
    ("a BETWEEN 3 AND 1", "left value(3) must less than or equal to right value(1)", 1, 11),
    ("a BETWEEN NULL AND 1", "values can not be null", 1, 11),
    ("a > 0.0", "is less than 4.9E-324", 1, 5),  # RocketMQ refuses a float literal below Double.MIN_VALUE
    ("a > 1e400", "is greater than", 1, 5),
    ("a > 9223372036854775808", "past a Java long", 1, 5),
    ("a IS 5", "was expecting NULL or NOT NULL", 1, 6),
    ("a IN ()", "a string literal", 1, 7),
    ("a = 007", "Encountered \"0\"", 1, 6),  # "0" is the only decimal starting with 0: 0, 0, 7
])
def test_bad_expressions_are_refused_with_their_position(text, message, line, column):
    with pytest.raises(FilterParseError) as e:
        parse(text)
    assert message in str(e.value)
    assert (e.value.line, e.value.column) == (line, column)
    assert f"at line {line}, column {column}" in str(e.value)


def test_between_bounds_that_are_not_constants_are_not_checked():
    # RocketMQ checks BETWEEN's order only when both bounds are constants; -5 is a negation
    assert parse("a BETWEEN -1 AND -5") == And(Compare(">=", a, Neg(c(1))), Compare("<=", a, Neg(c(5))))


def test_properties_of_lists_each_name_once_in_order():
    assert properties_of(parse("b > 1 AND (a IS NULL OR b IN ('x')) AND TAGS = 't'")) == ["b", "a", "TAGS"]


@pytest.mark.parametrize("text", ["(" * 400 + "a = 1" + ")" * 400, " OR ".join(["a = 1"] * 3000),
                                  "NOT " * 2000 + "a"])
def test_a_tree_too_deep_for_the_stack_is_refused_not_a_crash(text):
    with pytest.raises(FilterParseError, match="nested too deeply"):
        parse(text)


def test_a_long_list_is_fine_in_an_in():
    assert parse("a IN (" + ", ".join(f"'v{i}'" for i in range(5000)) + ")").values[-1] == "v4999"
