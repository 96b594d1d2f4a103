"""RocketMQ's SQL92 selector grammar (``SelectorParser.jj``) parsed into an expression tree.

The checks RocketMQ makes while building the tree are made here too, so an expression RocketMQ's
broker refuses is refused here (:class:`FilterParseError`, with the line and column of the token at
fault): ``a = NULL`` (use ``IS NULL``), ``<``/``BETWEEN`` against a string or boolean constant,
``IN`` on anything but a property, a non-boolean top level (``a + 1`` has no ``+``; ``'x'``,
``5``), float literals above ``Double.MAX_VALUE`` or below ``Double.MIN_VALUE`` (so ``0.0`` is
refused, as in RocketMQ), integer literals past a Java long, ``BETWEEN`` bounds in the wrong order.

How the tree evaluates (RocketMQ's semantics, not SQL's) is :mod:`spark_mq.filter.evaluate`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1
DOUBLE_MIN_VALUE = 5e-324  # Java's Double.MIN_VALUE: the smallest positive double
DOUBLE_MAX_VALUE = 1.7976931348623157e308

KEYWORDS = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH",
            "ENDSWITH")
STRING_TESTS = ("CONTAINS", "STARTSWITH", "ENDSWITH")
# deepest tree accepted (nested parentheses, or a chain of ANDs/ORs, each a level): evaluation recurses
# once per level, and a client's expression must never exhaust the broker's stack
MAX_DEPTH = 128
ORDERING = ("<", "<=", ">", ">=")


class FilterParseError(ValueError):
    """An expression RocketMQ would not compile; ``line``/``column`` (1-based) locate the fault."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{message} at line {line}, column {column}")
        self.line = line
        self.column = column


class Kind(Enum):
    """The Java type a constant (or a negated one) has: they decide how a property string converts."""

    INT = "Integer"
    LONG = "Long"
    DOUBLE = "Double"
    STR = "String"
    BOOL = "Boolean"
    NULL = "null"


NUMERIC = (Kind.INT, Kind.LONG, Kind.DOUBLE)


@dataclass(frozen=True)
class Prop:
    name: str


@dataclass(frozen=True)
class Const:
    value: object
    kind: Kind


@dataclass(frozen=True)
class Neg:
    """Unary minus: a number negated, anything else (a property's string) null."""
    operand: Expr


@dataclass(frozen=True)
class Compare:
    """``=`` or an ordering; ``<>`` is ``Not(Compare("="))`` and ``IS NULL`` is :class:`IsNull`."""
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class IsNull:
    operand: Expr


@dataclass(frozen=True)
class In:
    prop: Prop
    values: tuple[str, ...]
    negated: bool


@dataclass(frozen=True)
class StringTest:
    """CONTAINS/STARTSWITH/ENDSWITH and their NOT forms: FALSE (never null) for a missing value."""
    op: str
    operand: Expr
    search: str
    negated: bool


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class And:
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Or:
    left: Expr
    right: Expr


@dataclass(frozen=True)
class BoolCast:
    """A property used as a condition: FALSE when present (a string is not a Boolean), null when not."""
    prop: Prop


Expr = Prop | Const | Neg | Compare | IsNull | In | StringTest | Not | And | Or | BoolCast
BOOLEAN_NODES = (Compare, IsNull, In, StringTest, Not, And, Or, BoolCast)

NULL = Const(None, Kind.NULL)
TRUE = Const(True, Kind.BOOL)
FALSE = Const(False, Kind.BOOL)

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+))
  | (?P<decimal>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str  # "float", "decimal", "string", "id", "op", a keyword, or "<EOF>"
    text: str
    line: int
    column: int


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text`` (JavaCC's rules: longest match, keywords before identifiers)."""
    out: list[Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterParseError(f"Lexical error: encountered {text[pos]!r}", line, pos - line_start + 1)
        kind = m.lastgroup or ""
        value = m.group()
        if kind not in ("ws", "comment"):
            if kind == "id" and value.upper() in KEYWORDS:
                kind = value.upper()
            out.append(Token(kind, value, line, pos - line_start + 1))
        for i, ch in enumerate(value):
            if ch == "\n" or (ch == "\r" and value[i + 1:i + 2] != "\n"):
                line, line_start = line + 1, pos + i + 1
        pos = m.end()
    out.append(Token("<EOF>", "", line, pos - line_start + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def fail(self, message: str, at: Token | None = None) -> FilterParseError:
        at = at or self.tok
        return FilterParseError(message, at.line, at.column)

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind and not (self.tok.kind == "op" and self.tok.text == kind):
            shown = "<EOF>" if self.tok.kind == "<EOF>" else self.tok.text
            raise self.fail(f'Encountered "{shown}", was expecting {what}')
        return self.take()

    def is_op(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def boolean(self, e: Expr, at: Token) -> Expr:
        """RocketMQ's ``asBooleanExpression``."""
        if isinstance(e, Prop):
            return BoolCast(e)
        if isinstance(e, BOOLEAN_NODES) or (isinstance(e, Const) and e.kind in (Kind.BOOL, Kind.NULL)):
            return e
        raise self.fail(f"Expression will not result in a boolean value: {describe(e)}", at)

    def parse(self) -> Expr:
        start = self.tok
        e = self.boolean(self.or_expr(), start)
        if self.tok.kind != "<EOF>":
            raise self.fail(f'Encountered "{self.tok.text}", was expecting an operator, AND, OR or the end')
        return e

    def or_expr(self) -> Expr:
        at = self.tok
        left = self.and_expr()
        while self.tok.kind == "OR":
            self.take()
            at_r = self.tok
            right = self.and_expr()
            left = Or(self.boolean(left, at), self.boolean(right, at_r))
        return left

    def and_expr(self) -> Expr:
        at = self.tok
        left = self.equality()
        while self.tok.kind == "AND":
            self.take()
            at_r = self.tok
            right = self.equality()
            left = And(self.boolean(left, at), self.boolean(right, at_r))
        return left

    def equality(self) -> Expr:
        left = self.comparison()
        while True:
            if self.is_op("=") or self.is_op("<>"):
                op = self.take()
                at = self.tok
                right = self.comparison()
                self.check_equal_operands(left, right, op, at)
                left = Compare("=", left, right) if op.text == "=" else Not(Compare("=", left, right))
            elif self.tok.kind == "IS" and self.peek().kind == "NULL":
                self.i += 2
                left = IsNull(left)
            elif self.tok.kind == "IS" and self.peek().kind == "NOT" and self.peek(2).kind == "NULL":
                self.i += 3
                left = Not(IsNull(left))
            elif self.tok.kind == "IS":
                self.take()
                raise self.fail(f'Encountered "{self.tok.text or "<EOF>"}", was expecting NULL or NOT NULL')
            else:
                return left

    def check_equal_operands(self, left: Expr, right: Expr, op: Token, at: Token) -> None:
        for e in (left, right):
            if isinstance(e, Const) and e.kind is Kind.NULL:
                raise self.fail("'NULL' cannot be compared (use IS NULL / IS NOT NULL)", op)
        if isinstance(left, Const) and isinstance(right, Const) and left.kind is Kind.BOOL \
                and right.kind is not Kind.BOOL:
            raise self.fail(f"'{describe(left)}' cannot be compared with '{describe(right)}'", at)

    def check_ordering_operand(self, e: Expr, at: Token) -> None:
        if (isinstance(e, Const) and e.kind not in NUMERIC) or isinstance(e, BOOLEAN_NODES):
            raise self.fail(f"Value '{describe(e)}' cannot be compared", at)

    def ordering(self, op: str, left: Expr, right: Expr, at_l: Token, at_r: Token) -> Compare:
        self.check_ordering_operand(left, at_l)
        self.check_ordering_operand(right, at_r)
        return Compare(op, left, right)

    def comparison(self) -> Expr:
        at = self.tok
        left = self.unary()
        while True:
            t = self.tok
            negated = t.kind == "NOT" and self.peek().kind in (*STRING_TESTS, "BETWEEN", "IN")
            kind = self.peek().kind if negated else t.kind
            if t.kind == "op" and t.text in ORDERING:
                self.take()
                at_r = self.tok
                left = self.ordering(t.text, left, self.unary(), at, at_r)
            elif kind in STRING_TESTS:
                self.i += 2 if negated else 1
                left = StringTest(kind, left, self.string(), negated)
            elif kind == "BETWEEN":
                self.i += 2 if negated else 1
                at_lo = self.tok
                low = self.unary()
                self.expect("AND", "AND")
                at_hi = self.tok
                high = self.unary()
                left = self.between(left, low, high, negated, at, at_lo, at_hi)
            elif kind == "IN":
                self.i += 2 if negated else 1
                if not isinstance(left, Prop):
                    raise self.fail(f"Expected a property for In expression, got: {describe(left)}", at)
                self.expect("(", '"("')
                values = [self.string()]
                while self.is_op(","):
                    self.take()
                    values.append(self.string())
                self.expect(")", '"," or ")"')
                left = In(left, tuple(values), negated)
            else:
                return left

    def between(self, value: Expr, low: Expr, high: Expr, negated: bool, at: Token, at_lo: Token,
                at_hi: Token) -> Expr:
        if isinstance(low, Const) and isinstance(high, Const):
            if low.kind is Kind.NULL or high.kind is Kind.NULL:
                raise self.fail("Illegal values of between, values can not be null!", at_lo)
            if low.kind in NUMERIC and high.kind in NUMERIC and high.value < low.value:  # type: ignore[operator]
                raise self.fail(f"Illegal values of between, left value({low.value}) must less than or equal "
                                f"to right value({high.value})", at_lo)
        if negated:
            return Or(self.ordering("<", value, low, at, at_lo), self.ordering(">", value, high, at, at_hi))
        return And(self.ordering(">=", value, low, at, at_lo), self.ordering("<=", value, high, at, at_hi))

    def unary(self) -> Expr:
        t = self.tok
        if self.is_op("+"):
            self.take()
            return self.unary()
        if self.is_op("-"):
            self.take()
            return negate(self.unary())
        if t.kind == "NOT":
            self.take()
            at = self.tok
            return Not(self.boolean(self.unary(), at))
        return self.primary()

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == "string":
            return Const(self.string(), Kind.STR)
        if t.kind == "decimal":
            self.take()
            digits = t.text.rstrip("lL")
            value = int(digits)
            if value > LONG_MAX:
                raise self.fail(f'For input string: "{digits}" (past a Java long)', t)
            return Const(value, Kind.INT if value <= INT_MAX else Kind.LONG)
        if t.kind == "float":
            self.take()
            value = float(t.text)
            if value > DOUBLE_MAX_VALUE:
                raise self.fail(f"{t.text} is greater than {DOUBLE_MAX_VALUE}", t)
            if value < DOUBLE_MIN_VALUE:
                raise self.fail(f"{t.text} is less than 4.9E-324 (Double.MIN_VALUE)", t)
            return Const(value, Kind.DOUBLE)
        if t.kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            return {"TRUE": TRUE, "FALSE": FALSE, "NULL": NULL}[t.kind]
        if t.kind == "id":
            self.take()
            return Prop(t.text)
        if self.is_op("("):
            self.take()
            e = self.or_expr()
            self.expect(")", '")"')
            return e
        shown = "<EOF>" if t.kind == "<EOF>" else t.text
        raise self.fail(f'Encountered "{shown}", was expecting a property, a literal, NOT, "-" or "("')

    def string(self) -> str:
        t = self.expect("string", "a string literal ('...')")
        return t.text[1:-1].replace("''", "'")


def negate(e: Expr) -> Expr:
    """``-e``, not folded even for a constant: RocketMQ's checks see ``-5`` as no constant (so
    ``a BETWEEN -1 AND -5`` passes them and matches nothing)."""
    return Neg(e)


def describe(e: Expr) -> str:
    """An expression as RocketMQ's messages show it."""
    if isinstance(e, Prop):
        return e.name
    if isinstance(e, Const):
        if e.kind is Kind.STR:
            return "'" + str(e.value).replace("'", "''") + "'"
        if e.kind in (Kind.BOOL, Kind.NULL):
            return {True: "TRUE", False: "FALSE", None: "NULL"}[e.value]  # type: ignore[index]
        return str(e.value)
    if isinstance(e, Neg):
        return f"(- {describe(e.operand)})"
    if isinstance(e, Compare):
        return f"({describe(e.left)} {'==' if e.op == '=' else e.op} {describe(e.right)})"
    if isinstance(e, IsNull):
        return f"({describe(e.operand)} IS NULL)"
    if isinstance(e, In):
        return f"{e.prop.name} {'NOT IN' if e.negated else 'IN'} ( {', '.join(e.values)} )"
    if isinstance(e, StringTest):
        return f"({describe(e.operand)} {'NOT ' if e.negated else ''}{e.op} '{e.search}')"
    if isinstance(e, Not):
        return f"(NOT {describe(e.operand)})"
    if isinstance(e, And):
        return f"({describe(e.left)} && {describe(e.right)})"
    if isinstance(e, Or):
        return f"({describe(e.left)} || {describe(e.right)})"
    return describe(e.prop)


def parse(text: str) -> Expr:
    """The tree of a SQL92 selector; FilterParseError (with line and column) when RocketMQ would refuse
    it, or when it nests deeper than MAX_DEPTH."""
    parser = _Parser(text)
    try:
        tree = parser.parse()
    except RecursionError:
        raise parser.fail(f"expression nested too deeply (over {MAX_DEPTH} levels)") from None
    if depth(tree) > MAX_DEPTH:
        raise FilterParseError(f"expression nested too deeply (over {MAX_DEPTH} levels): split it or use IN", 1, 1)
    return tree


def _children(e: Expr) -> list[Expr]:
    return [c for c in (getattr(e, f, None) for f in ("operand", "left", "right", "prop")) if c is not None]


def depth(e: Expr) -> int:
    """Levels of the tree (walked without recursion: any tree the parser built can be measured)."""
    deepest, stack = 0, [(e, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((c, level + 1) for c in _children(node))
    return deepest


def properties_of(e: Expr) -> list[str]:
    """The property names ``e`` reads, in first-use order."""
    out: dict[str, None] = {}

    def walk(x: Expr) -> None:
        if isinstance(x, Prop):
            out[x.name] = None
        for child in _children(x):
            walk(child)

    walk(e)
    return list(out)
