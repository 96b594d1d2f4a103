"""A SQL92 filter evaluated over a batch of messages at once, with RocketMQ's semantics.

Each property the expression names becomes one Arrow string column (null where the message lacks
it), built from the units' property bytes without a per-message loop; every node of the tree is
then one pass of numpy/``pyarrow.compute`` over the whole batch. A node's value is three masks
(true, null, error), so RocketMQ's three-valued logic and its exceptions carry through:

- property values are strings; against a number constant a string is parsed as the constant's Java
  type (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``), against a boolean as
  ``Boolean.valueOf``; two strings under ``<``/``>`` are both parsed as doubles;
- a string that does not parse is an *error*: RocketMQ's evaluation throws, and its broker
  (``ExpressionMessageFilter``) then does not deliver the message, whatever the rest of the
  expression says (AND/OR short-circuit left to right as Java does, so an error in the right
  operand of an OR whose left is TRUE is never reached);
- a missing property is null: ``=``, ``<``..., ``IN`` give null, ``IS NULL`` TRUE, CONTAINS/
  STARTSWITH/ENDSWITH (and their NOT forms) FALSE; ``<>`` is ``NOT (=)`` so null too; a property
  alone as a condition is FALSE (a string is not a Boolean) or null;
- booleans against numbers compare unequal (Java's -1), a number compares with another across types
  after widening (int -> long -> double);
- a message matches only when the whole expression is TRUE (null and errors do not match).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.common.properties import PackedProperties
from spark_mq.common.unit.batch import decode_units
from spark_mq.filter.sql92 import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    NUMERIC,
    And,
    BoolCast,
    Compare,
    Const,
    Expr,
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

_INTEGER = r"^[+-]?[0-9]+$"
# Java's Double.valueOf after its trim (hexadecimal floats left out: they never match)
_DOUBLE = r"^[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?)$"
_JAVA_BLANKS = "".join(map(chr, range(33)))  # String.trim() removes every char <= ' '
_LONG_DIGITS = str(LONG_MAX)


@dataclass(frozen=True)
class Value:
    """A node's value over the batch: a constant (``values`` a scalar) or a column; nulls and errors
    as masks."""

    kind: Kind
    values: object  # np.ndarray, pa.Array (STR columns) or a Python scalar
    null: np.ndarray
    error: np.ndarray


@dataclass(frozen=True)
class Truth:
    """A condition's value: TRUE rows, null rows, error rows (the rest are FALSE)."""

    true: np.ndarray
    null: np.ndarray
    error: np.ndarray

    @property
    def false(self) -> np.ndarray:
        return ~self.true & ~self.null


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def _np(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _integers(col: pa.Array, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """``Integer.valueOf``/``Long.valueOf`` of each string: (values, parsed)."""
    values, ok = _plain_longs(col) or _longs(col)
    if kind is Kind.INT:
        ok &= (values >= INT_MIN) & (values <= INT_MAX)
    return np.where(ok, values, 0), ok


def _plain_longs(col: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``Long.valueOf`` of each string when Arrow's parse gives it, in one cast: None when any string is one
    Arrow refuses (``+5``, or one Java refuses too) or reads otherwise (hexadecimal ``0x1f``, which Java
    refuses), left to :func:`_longs`. Arrow takes ``-?[0-9]+`` within a long, and ``0x`` hexadecimal."""
    if pc.any(pc.match_substring(col, "x", ignore_case=True)).as_py():
        return None
    try:
        parsed = pc.cast(col, pa.int64())
    except pa.ArrowInvalid:
        return None
    return parsed.fill_null(0).to_numpy(zero_copy_only=False), _np(pc.is_valid(parsed))


def _longs(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``Long.valueOf`` of each string, whatever they hold: (values, parsed)."""
    ok = _np(pc.fill_null(pc.match_substring_regex(col, _INTEGER), False))
    digits = pc.utf8_ltrim(pc.utf8_ltrim(col, "+-"), "0")
    width = _np(pc.fill_null(pc.less_equal(pc.utf8_length(digits), 18), False))
    wide = ok & ~width  # 19 digits or more: in range only at 19 and up to Long.MAX_VALUE's digits
    if wide.any():
        padded = pc.utf8_lpad(digits, 19, "0")
        # LONG_MIN's magnitude is one more than LONG_MAX's: "-9223372036854775808" is the one extra
        in_range = pc.or_(pc.less_equal(padded, _LONG_DIGITS),
                          pc.and_(pc.starts_with(col, "-"), pc.equal(padded, _LONG_DIGITS[:-1] + "8")))
        ok &= ~wide | (_np(pc.fill_null(in_range, False)) & _np(pc.fill_null(pc.equal(pc.utf8_length(padded),
                                                                                       19), False)))
    values = pc.cast(pc.if_else(pa.array(ok), pc.utf8_ltrim(col, "+"), "0"), pa.int64()).to_numpy(
        zero_copy_only=False)
    return values, ok


def _doubles(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``Double.valueOf`` of each string: (values, parsed)."""
    text = pc.utf8_trim(col, _JAVA_BLANKS)
    ok = _np(pc.fill_null(pc.match_substring_regex(text, _DOUBLE), False))
    plain = pc.replace_substring_regex(pc.replace_substring_regex(text, r"[fFdD]$", ""), r"^\+", "")
    plain = pc.replace_substring_regex(plain, r"\.$", "")  # "5." is 5
    plain = pc.replace_substring_regex(plain, r"\.([eE])", "$1")  # "5.e3" is 5e3
    values = pc.cast(pc.if_else(pa.array(ok), plain, "0"), pa.float64()).to_numpy(zero_copy_only=False)
    return np.where(ok, values, 0.0), ok


def _booleans(col: pa.Array) -> np.ndarray:
    """``Boolean.valueOf``: true only for "true" in any case."""
    return _np(pc.fill_null(pc.equal(pc.utf8_lower(col), "true"), False))


def _java_sign(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``compareTo`` of two columns of one numpy type (Double's: NaN above all, -0.0 below 0.0)."""
    sign = (left > right).astype(np.int8) - (left < right).astype(np.int8)
    if left.dtype.kind == "f":
        ln, rn = np.isnan(left), np.isnan(right)
        sign = np.where(ln | rn, ln.astype(np.int8) - rn.astype(np.int8), sign)
        zeros = (left == 0) & (right == 0)
        sign = np.where(zeros, np.signbit(right).astype(np.int8) - np.signbit(left).astype(np.int8), sign)
    return sign


class BatchEvaluator:
    """The values of one expression's nodes over one batch of ``n`` messages."""

    def __init__(self, columns: Mapping[str, pa.Array], n: int) -> None:
        self.columns = columns
        self.n = n
        # a property's column converted to a kind, by (column id, kind): `a >= 10 AND a < 60` parses `a` once
        self._converted: dict[tuple[int, Kind], tuple[np.ndarray, np.ndarray]] = {}

    # values -------------------------------------------------------------------------------------

    def value(self, e: Expr) -> Value:
        n = self.n
        if isinstance(e, Prop):
            col = self.columns[e.name]
            return Value(Kind.STR, col, _np(pc.is_null(col)), _zeros(n))
        if isinstance(e, Const):
            return Value(e.kind, e.value, np.full(n, e.kind is Kind.NULL), _zeros(n))
        if isinstance(e, Neg):
            v = self.value(e.operand)
            if v.kind in NUMERIC:
                return Value(v.kind, -v.values, v.null, v.error)  # type: ignore[operator]
            return Value(Kind.NULL, None, np.ones(n, dtype=bool), v.error)  # not a Number: null
        t = self.truth(e)
        return Value(Kind.BOOL, t.true, t.null, t.error)

    def _column(self, v: Value, dtype: type) -> np.ndarray:
        if isinstance(v.values, np.ndarray):
            return v.values.astype(dtype, copy=False)
        return np.full(self.n, v.values, dtype=dtype)

    def _parsed(self, v: Value, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
        """A STR value converted to ``kind``: (values, parsed)."""
        col = self._as_array(v)
        kept = col is v.values  # a property's column; a constant's array is made anew each time: never kept
        key = (id(col), kind)
        if kept and key in self._converted:
            return self._converted[key]
        if kind is Kind.DOUBLE:
            converted = _doubles(col)
        elif kind is Kind.BOOL:
            converted = _booleans(col), np.ones(self.n, dtype=bool)
        else:
            converted = _integers(col, kind)
        if kept:
            self._converted[key] = converted
        return converted

    def _compare(self, left: Value, right: Value, ordering: bool) -> tuple[np.ndarray, np.ndarray]:
        """RocketMQ's ``__compare`` (string conversion on) where both are present: (sign, error)."""
        n = self.n
        lk, rk = left.kind, right.kind
        if Kind.NULL in (lk, rk):  # every row null: the caller never looks at these
            return np.zeros(n, dtype=np.int8), _zeros(n)
        if lk is Kind.STR and rk is Kind.STR:
            if ordering:  # both parsed as doubles, an exception if either is not one
                (lv, lok), (rv, rok) = self._parsed(left, Kind.DOUBLE), self._parsed(right, Kind.DOUBLE)
                return _java_sign(lv, rv), ~(lok & rok)
            same = _np(pc.fill_null(pc.equal(self._as_array(left), self._as_array(right)), False))
            return (~same).astype(np.int8), _zeros(n)
        if lk is Kind.STR or rk is Kind.STR:
            target = rk if lk is Kind.STR else lk
            if target is Kind.BOOL and rk is Kind.STR:  # Java casts the Boolean to a String: it throws
                return np.zeros(n, dtype=np.int8), np.ones(n, dtype=bool)
            s, other = (left, right) if lk is Kind.STR else (right, left)
            parsed, ok = self._parsed(s, target)
            other_col = self._column(other, parsed.dtype.type)
            sign = _java_sign(parsed, other_col) if s is left else _java_sign(other_col, parsed)
            return sign, ~ok
        if lk is Kind.BOOL or rk is Kind.BOOL:
            if lk is rk:
                return _java_sign(self._column(left, np.int8), self._column(right, np.int8)), _zeros(n)
            return np.full(n, -1, dtype=np.int8), _zeros(n)  # a Boolean and a Number: Java's -1
        dtype = np.float64 if Kind.DOUBLE in (lk, rk) else np.int64
        return _java_sign(self._column(left, dtype), self._column(right, dtype)), _zeros(n)

    def _as_array(self, v: Value) -> pa.Array:
        return v.values if isinstance(v.values, pa.Array) else pa.array([v.values] * self.n, pa.string())

    # conditions ---------------------------------------------------------------------------------

    def truth(self, e: Expr) -> Truth:
        n = self.n
        if isinstance(e, Const):
            return Truth(np.full(n, e.value is True), np.full(n, e.kind is Kind.NULL), _zeros(n))
        if isinstance(e, And | Or):
            left, right = self.truth(e.left), self.truth(e.right)
            decided = left.false if isinstance(e, And) else left.true  # Java's short circuit
            error = left.error | (~decided & right.error)
            if isinstance(e, And):
                false = left.false | right.false
                return Truth(~false & ~left.null & ~right.null, ~false & (left.null | right.null), error)
            true = left.true | right.true
            return Truth(true, ~true & (left.null | right.null), error)
        if isinstance(e, Not):
            t = self.truth(e.operand)
            return Truth(t.false, t.null, t.error)
        if isinstance(e, BoolCast):
            v = self.value(e.prop)
            return Truth(_zeros(n), v.null, v.error)
        if isinstance(e, IsNull):
            v = self.value(e.operand)
            return Truth(v.null.copy(), _zeros(n), v.error)
        if isinstance(e, In):
            v = self.value(e.prop)
            member = _np(pc.fill_null(pc.is_in(v.values, value_set=pa.array(list(e.values), pa.string())), False))
            return Truth(~v.null & (member ^ e.negated), v.null, v.error)
        if isinstance(e, StringTest):
            return self._string_test(e)
        if isinstance(e, Compare):
            return self._comparison(e)
        raise TypeError(f"not a condition: {e!r}")  # the parser never builds one

    def _string_test(self, e: StringTest) -> Truth:
        n = self.n
        if not e.search:  # RocketMQ answers FALSE before it looks at the value
            return Truth(_zeros(n), _zeros(n), _zeros(n))
        v = self.value(e.operand)
        if v.kind is not Kind.STR:
            return Truth(_zeros(n), _zeros(n), v.error)
        col = self._as_array(v)
        if e.op == "CONTAINS":
            hit = pc.match_substring(col, e.search)
        elif e.op == "STARTSWITH":
            hit = pc.starts_with(col, e.search)
        else:
            hit = pc.ends_with(col, e.search)
        found = _np(pc.fill_null(hit, False))
        return Truth(~v.null & (found ^ e.negated), _zeros(n), v.error)

    def _comparison(self, e: Compare) -> Truth:
        left, right = self.value(e.left), self.value(e.right)
        both = ~left.null & ~right.null
        if e.op == "=":
            sign, error = self._compare(left, right, ordering=False)
            error = left.error | right.error | (both & error)
            one_null = left.null ^ right.null
            true = (left.null & right.null) | (both & (sign == 0))
            return Truth(true & ~error, one_null & left.null, error)
        sign, error = self._compare(left, right, ordering=True)
        # Java returns null on a null left before it evaluates the right
        error = left.error | (~left.null & right.error) | (both & error)
        holds = {"<": sign < 0, "<=": sign <= 0, ">": sign > 0, ">=": sign >= 0}[e.op]
        return Truth(both & holds & ~error, ~both, error)


@dataclass(frozen=True)
class Sql92Filter:
    """One compiled SQL92 expression: parse once, match many batches."""

    expression: str
    tree: Expr

    @classmethod
    def compile(cls, expression: str) -> Sql92Filter:
        """FilterParseError (with line and column) when RocketMQ would refuse ``expression``."""
        return cls(expression, parse(expression))

    @cached_property
    def properties(self) -> list[str]:
        """The property names the expression reads (TAGS included when named)."""
        return properties_of(self.tree)

    def matches(self, columns: Mapping[str, pa.Array], n: int) -> np.ndarray:
        """Which of ``n`` messages match, given one string column (null = absent) per name in
        :attr:`properties` — the entry point for callers that already hold property columns."""
        t = BatchEvaluator(columns, n).truth(self.tree)
        return t.true & ~t.error

    def match_units(self, data: bytes, sizes: np.ndarray) -> np.ndarray:
        """Which of the stored units back to back in ``data`` (of ``sizes``) match."""
        n = int(sizes.size)
        if n == 0:
            return _zeros(0)
        buf = np.frombuffer(data, dtype=np.uint8)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        units = decode_units(buf, starts)
        return self.matches(property_columns(buf, units.props_start, units.props_end, self.properties), n)


def property_columns(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, names: list[str]
                     ) -> dict[str, pa.Array]:
    """One Arrow string column per name: each message's value of that property (null when absent),
    gathered from the property strings ``buf[starts[i]:ends[i]]`` with no per-message loop."""
    if not names:
        return {}
    packed = PackedProperties.pack(buf, starts, ends)
    out = {}
    for name in names:
        begin, end = packed.find(name)
        present = begin >= 0
        lengths = np.where(present, end - begin, 0)
        offsets = np.zeros(lengths.size + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        gather = np.repeat(begin - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
        column = pa.Array.from_buffers(pa.string(), lengths.size,
                                       [pa.array(present).buffers()[1], pa.py_buffer(offsets),
                                        pa.py_buffer(packed.data[gather].tobytes())],
                                       null_count=int(lengths.size - np.count_nonzero(present)))
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:  # bytes that are not UTF-8: decoded as Java decodes them, with U+FFFD
            raw = column.view(pa.binary())
            column = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
                              pa.string())
        out[name] = column
    return out


__all__ = ["BatchEvaluator", "Sql92Filter", "property_columns"]
