"""The message schema (DESIGN.md: one Arrow schema everywhere), in its two timestamp forms.

:data:`SCHEMA` is what the decoder makes of message units: timestamps as the commitlog holds them,
ms since the epoch. :data:`UTC_SCHEMA` is the same columns with timestamps as UTC instants in µs:
what Spark's ``TimestampType`` and Delta's ``timestamp`` hold, so it is both the Arrow form the
``spark_mq`` source yields (Spark checks every batch against it) and the form the archive stores.
Every other schema of the package is derived from these two (a column added or dropped).
A reader asked for some columns only (a pruned Spark schema) yields :func:`utc_schema` of them: the
same fields, in the order asked.

Thread-safety: constants and pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker_name", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("uniq_key", pa.string()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("born_timestamp", pa.timestamp("ms")),
        ("store_timestamp", pa.timestamp("ms")),
        ("born_host", pa.string()),
        ("store_host", pa.string()),
        ("reconsume_times", pa.int32()),
        ("sys_flag", pa.int32()),
        ("flag", pa.int32()),
    ]
)
UTC_SCHEMA = pa.schema([pa.field(f.name, UTC_TIMESTAMP) if pa.types.is_timestamp(f.type) else f for f in SCHEMA])
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)


def utc_schema(columns: Sequence[str]) -> pa.Schema:
    """The fields of :data:`UTC_SCHEMA` named by ``columns``, in that order (``KeyError`` for a name
    that is not one of :data:`COLUMNS`)."""
    return UTC_SCHEMA if tuple(columns) == COLUMNS else pa.schema([UTC_SCHEMA.field(c) for c in columns])


def to_utc_schema(rows: pa.RecordBatch | pa.Table, schema: pa.Schema = UTC_SCHEMA) -> pa.RecordBatch | pa.Table:
    """``rows`` (any column order, either form, at least ``schema``'s columns) in ``schema`` (
    :data:`UTC_SCHEMA` or a :func:`utc_schema`), a batch as a batch and a table as a table; returned as
    is when already in it."""
    if rows.schema.equals(schema):
        return rows
    columns = [column if column.type == f.type else column.cast(f.type)  # a cast to its own type is not free
               for f, column in ((f, rows.column(f.name)) for f in schema)]
    if isinstance(rows, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.table(columns, schema=schema)


def in_columns(batches: Iterable[pa.RecordBatch], columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """``batches`` (each with at least ``columns``) in ``utc_schema(columns)``: a pruned read of a source
    that yields whole rows (the archive, the key index)."""
    schema = utc_schema(columns)
    return (to_utc_schema(batch, schema) for batch in batches)


def to_message_schema(table: pa.Table) -> pa.Table:
    """``table`` (any column order, either form) in :data:`SCHEMA`."""
    return pa.table([table.column(f.name).cast(f.type) for f in SCHEMA], schema=SCHEMA)
