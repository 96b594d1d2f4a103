"""Filter pushdown of the ``spark_mq`` batch reader (``DataSourceReader.pushFilters``): which of Spark's
filters the brokers can answer, and how a planned read narrows by them.

Spark hands the reader the AND-ed filters of a query; :func:`push_filters` keeps what the brokers can
do and returns the rest, which Spark evaluates after the scan (none is ever dropped):

- ``tags = 'a'`` / ``tags IN ('a', 'b')``: the broker's tag filter, intersected with option ``tags``.
  Exact (the reader checks the exact tags again), so Spark does not re-evaluate them.
- ``queue_id`` / ``broker_name`` equality or IN: partition pruning. Exact.
- ``store_timestamp`` >, >=, <, <=, =: each queue's offset range narrowed by SEARCH_OFFSET_BY_TIMESTAMP
  (the first offset stored at or after a time: store times grow with offsets in a queue), so a one-hour
  window of a long topic pulls about an hour. The bounds are rounded outwards to whole ms and the
  filters stay with Spark as well, which makes the edges exact.
- ``property.<name>`` (option ``propertyColumns``: :mod:`spark_mq.spark.property_column`) ``= 'v'``,
  ``IN ('v', ...)``, ``IS [NOT] NULL``, ``LIKE 'v%'`` / ``'%v'`` / ``'%v%'``: a SQL92 clause (``name = 'v'``,
  ``name IN (...)``, ``name IS [NOT] NULL``, ``name STARTSWITH``/``ENDSWITH``/``CONTAINS 'v'``), AND-ed with
  option ``sqlFilter``, which the brokers filter by. Exact (a message without the property is null in
  Spark and not matched by the broker), so Spark does not re-evaluate them. Spark gives a Python data
  source no filter on a map element (``properties['name'] = 'v'``): hence the struct column.
- ``keys = 'k'``: the broker's key index (QUERY_MESSAGE) instead of pulling the queues. The index
  matches a message whose KEYS list ``k`` (or whose UNIQ_KEY is ``k``), more than ``keys = 'k'`` does,
  so the filter stays with Spark. A broker whose index gives as many hits as asked for (it may hold
  more), or cannot answer, is read by pulling its ranges instead.

Why two reader classes (:mod:`spark_mq.spark.batch`): pyspark 4.2 refuses any reader that overrides
``pushFilters`` when ``spark.sql.python.filterPushdown.enabled`` is false (its default), failing every
read. The provider hands the filtering reader only to the planner that pushes filters
(:func:`called_by_pushdown_planner`); otherwise the plain reader, and Spark filters everything.

Thread-safety: immutable values and pure functions; :func:`read_indexed` opens its own client.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from spark_mq.arrow.indexed import DEFAULT_MAX_HOT, is_indexable_key, messages_to_arrow, query_window
from spark_mq.arrow.queues import QueueKey, TopicQueues
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S, QueueRange, read_range
from spark_mq.arrow.schema import to_utc_schema
from spark_mq.client.config import open_api
from spark_mq.client.subscription import parse_tags
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.filter.compose import all_of, literal, one_of
from spark_mq.spark.offset_reader import OffsetSource
from spark_mq.spark.property_column import PROPERTY_COLUMN
from spark_mq.spark.sql_filter import matching_rows

log = logging.getLogger(__name__)

TAGS_COLUMN = ("tags",)
KEYS_COLUMN = ("keys",)
TIME_COLUMN = ("store_timestamp",)
QUEUE_COLUMN = ("queue_id",)
BROKER_COLUMN = ("broker_name",)
TAG_SEPARATOR = "||"  # of a tag expression ("a || b")
ALL_TAGS = "*"
# Spark's planner that pushes filters (spark.sql.python.filterPushdown.enabled=true) calls reader() from here
PUSHDOWN_PLANNER = "pyspark.sql.worker.data_source_pushdown_filters"
INDEX_MAX_HITS = DEFAULT_MAX_HOT  # QUERY_MESSAGE max_num; a broker giving this many is read by pulling instead
_STRING_TESTS = {StringStartsWith: "STARTSWITH", StringEndsWith: "ENDSWITH", StringContains: "CONTAINS"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Pushed:
    """What the brokers answer of a query's filters; None leaves that side open."""

    tags: frozenset[str] | None = None  # None: any tag
    begin_ms: int | None = None  # store_timestamp >= begin_ms
    end_ms: int | None = None  # store_timestamp < end_ms
    queue_ids: frozenset[int] | None = None
    brokers: frozenset[str] | None = None
    key: str | None = None  # read through the brokers' key index
    sql: str | None = None  # SQL92 clauses of property filters, AND-ed

    def tag_expression(self, option_tags: str) -> str | None:
        """The tag expression of the pull: option ``tags`` and the pushed tags intersected; None when no
        tag can match (the read is empty)."""
        wanted = parse_tags(option_tags)
        if self.tags is not None:
            wanted = self.tags if wanted is None else wanted & self.tags
        if wanted is None:
            return ALL_TAGS
        return f" {TAG_SEPARATOR} ".join(sorted(wanted)) if wanted else None

    def prune(self, queues: TopicQueues) -> TopicQueues:
        """``queues`` without those the ``queue_id`` / ``broker_name`` filters rule out."""
        kept = tuple(k for k in queues.queues if (self.brokers is None or k[0] in self.brokers)
                     and (self.queue_ids is None or k[1] in self.queue_ids))
        return replace(queues, queues=kept)

    def narrow(self, source: OffsetSource, queues: TopicQueues, starting: Mapping[QueueKey, int],
               ending: Mapping[QueueKey, int]) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
        """Each queue's [start, end) cut to the offsets stored within [begin_ms, end_ms), as the broker's
        offset-by-time search finds them; an empty range starts at its end."""
        start_out, end_out = {}, {}
        for key in queues.queues:
            start, end = starting[key], ending[key]
            if self.begin_ms is not None and start < end:
                start = max(start, source.offset_by_timestamp(key, self.begin_ms))
            if self.end_ms is not None and start < end:
                end = min(end, source.offset_by_timestamp(key, self.end_ms))
            start_out[key], end_out[key] = min(start, end), end
        return start_out, end_out


def called_by_pushdown_planner() -> bool:
    """Whether ``DataSource.reader()`` (the caller's caller) was called by Spark's filter-pushdown planner,
    the only one that calls ``pushFilters`` (see the module doc)."""
    caller = sys._getframe(2).f_globals
    spec = caller.get("__spec__")
    return PUSHDOWN_PLANNER in (caller.get("__name__"), getattr(spec, "name", None))


def push_filters(filters: Iterable[Filter], property_columns: Sequence[str] = ()) -> tuple[Pushed, list[Filter]]:
    """What the brokers can do of ``filters`` (AND-ed), and the filters Spark must still evaluate
    (the very objects it passed, as ``pushFilters`` must return them). ``property_columns``: the fields of
    column ``property``."""
    pushed, kept, clauses = Pushed(), [], []
    for f in filters:
        clause = _property_clause(f, property_columns)
        if clause is not None:
            clauses.append(clause)
            continue
        narrowed = _push_one(pushed, f)
        if narrowed is None or f.attribute in (TIME_COLUMN, KEYS_COLUMN):  # type: ignore[attr-defined]
            kept.append(f)
        pushed = narrowed or pushed
    return replace(pushed, sql=all_of(clauses)), kept


def _property_clause(f: Filter, property_columns: Sequence[str]) -> str | None:
    """``f`` on a field of column ``property`` as a SQL92 clause with the same rows; None when it is not one
    or the grammar cannot say it exactly (a number or an empty search: Spark casts or matches differently)."""
    path = getattr(f, "attribute", ())
    if len(path) != 2 or path[0] != PROPERTY_COLUMN or path[1] not in property_columns:
        return None
    name = path[1]
    if isinstance(f, IsNull | IsNotNull):
        return f"{name} IS {'NOT ' if isinstance(f, IsNotNull) else ''}NULL"
    values = f.value if isinstance(f, In) else (f.value,)
    if not values or not all(isinstance(v, str) for v in values):
        return None
    if isinstance(f, EqualTo):
        return f"{name} = {literal(f.value)}"
    if isinstance(f, In):
        return one_of(name, values)
    op = _STRING_TESTS.get(type(f))
    return f"{name} {op} {literal(f.value)}" if op is not None and f.value else None


def _push_one(pushed: Pushed, f: Filter) -> Pushed | None:
    """``pushed`` narrowed by ``f``; None when the brokers cannot answer ``f``."""
    if not isinstance(f, (EqualTo, In, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
        return None
    values = f.value if isinstance(f, In) else (f.value,)
    if f.attribute == TIME_COLUMN:
        ms = _floor_ms(f.value) if not isinstance(f, In) else None
        if ms is None:
            return None
        begin = ms if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)) else None
        end = ms + 1 if isinstance(f, (EqualTo, LessThan, LessThanOrEqual)) else None
        return replace(pushed, begin_ms=_tighter(pushed.begin_ms, begin, max),
                       end_ms=_tighter(pushed.end_ms, end, min))
    if not isinstance(f, (EqualTo, In)):
        return None
    if f.attribute == TAGS_COLUMN and all(_is_tag(v) for v in values):
        return replace(pushed, tags=_intersect(pushed.tags, values))
    if f.attribute == QUEUE_COLUMN and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return replace(pushed, queue_ids=_intersect(pushed.queue_ids, values))
    if f.attribute == BROKER_COLUMN and all(isinstance(v, str) for v in values):
        return replace(pushed, brokers=_intersect(pushed.brokers, values))
    if f.attribute == KEYS_COLUMN and isinstance(f, EqualTo) and is_indexable_key(f.value) and pushed.key is None:
        return replace(pushed, key=f.value)
    return None


def _floor_ms(value: object) -> int | None:
    """A Spark TIMESTAMP literal (an aware datetime) as whole ms since the epoch, rounded down; None for
    anything else (a naive datetime is a TIMESTAMP_NTZ: not pushed)."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _MS


def _tighter(current: int | None, new: int | None, pick) -> int | None:
    return current if new is None else new if current is None else pick(current, new)


def _intersect(current: frozenset | None, values: Iterable) -> frozenset:
    return frozenset(values) if current is None else current & frozenset(values)


def _is_tag(value: object) -> bool:
    """Whether the broker's tag expression can name ``value`` exactly (one tag, not ``*``, not padded)."""
    return (isinstance(value, str) and value != ALL_TAGS and value == value.strip() and value != ""
            and TAG_SEPARATOR not in value)


# -- reading through the key index ----------------------------------------------------------------------


@dataclass(frozen=True)
class IndexedRead:
    """The messages carrying ``key`` within ``ranges`` (queues of one topic on one broker), read through the broker's
    key index: plain, picklable data only."""

    key: str
    ranges: tuple[QueueRange, ...]
    begin_ms: int | None
    end_ms: int | None
    sql: str | None = None  # the read's SQL92 filter (sqlFilter and pushed property filters): judged on the hits


def by_broker(key: str, ranges: Iterable[QueueRange], pushed: Pushed, sql: str | None = None) -> list[IndexedRead]:
    """``ranges`` grouped into one index read per topic and broker (QUERY_MESSAGE names one topic)."""
    grouped: dict[tuple[str, str], list[QueueRange]] = {}
    for r in ranges:
        grouped.setdefault((r.topic, r.broker_name), []).append(r)
    return [IndexedRead(key, tuple(rs), pushed.begin_ms, pushed.end_ms, sql) for _, rs in sorted(grouped.items())]


def read_indexed(part: IndexedRead, *, timeout: float = REQUEST_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """The index's hits that lie in ``part.ranges`` and carry their tags, in ``UTC_SCHEMA`` batches; the
    ranges pulled whole when the index may not have given every hit."""
    first = part.ranges[0]
    begin, end = query_window(part.begin_ms, part.end_ms)
    try:
        with open_api(first.client, timeout) as api:
            found = api.query_message(first.broker_addr, first.topic, part.key, INDEX_MAX_HITS, begin, end)
    except (MQClientError, RemotingError) as e:
        log.warning("broker %s cannot look key %r up (%s): pulling its queues instead", first.broker_name,
                    part.key, e)
        found = None
    if found is None or len(found) >= INDEX_MAX_HITS:
        for r in part.ranges:
            yield from read_range(r, timeout=timeout)
        return
    rows = messages_to_arrow(found, first.broker_name)
    queue_id, offset, tags = rows.column("queue_id"), rows.column("queue_offset"), rows.column("tags")
    mask = pa.repeat(False, rows.num_rows)
    for r in part.ranges:
        wanted = parse_tags(r.tags)
        hit = pc.and_(pc.equal(queue_id, r.queue_id),
                      pc.and_(pc.greater_equal(offset, r.start), pc.less(offset, r.end)))
        if wanted is not None:
            hit = pc.and_(hit, pc.fill_null(pc.is_in(tags, value_set=pa.array(sorted(wanted))), False))
        mask = pc.or_(mask, hit)
    for batch in matching_rows(rows.filter(mask).to_batches(), part.sql):
        yield to_utc_schema(batch)
