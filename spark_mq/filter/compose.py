"""SQL92 expressions written by code rather than by a person: a tag expression, a literal or a
comparison as RocketMQ's grammar spells it, and several expressions AND-ed into the one a
subscription carries (a subscription holds one expression).

Thread-safety: pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from spark_mq.common.properties import TAGS
from spark_mq.filter.sql92 import KEYWORDS

_NAME = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")


def is_property_name(name: str) -> bool:
    """Whether the grammar can name property ``name`` (an identifier that is not a keyword)."""
    return _NAME.fullmatch(name) is not None and name.upper() not in KEYWORDS


def literal(value: str) -> str:
    """``value`` as a string literal (a quote doubled)."""
    return "'" + value.replace("'", "''") + "'"


def one_of(name: str, values: Iterable[str]) -> str:
    """``name IN ('a', 'b')``: the property is one of ``values`` (sorted, so equal sets write equally)."""
    return f"{name} IN ({', '.join(literal(v) for v in sorted(values))})"


def tags_in(tags: Iterable[str]) -> str:
    """The tag expression ``a || b`` as SQL92: TAGS is a property like any other."""
    return one_of(TAGS, tags)


def all_of(expressions: Iterable[str | None]) -> str | None:
    """The given expressions (None ones left out) AND-ed; None when none is given. Each is
    parenthesised with the closing parenthesis on a line of its own, so a trailing ``--`` comment of
    one cannot swallow it."""
    given = [e for e in expressions if e is not None]
    if len(given) <= 1:
        return given[0] if given else None
    return " AND ".join(f"({e}\n)" for e in given)


__all__ = ["all_of", "is_property_name", "literal", "one_of", "tags_in"]
