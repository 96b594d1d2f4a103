"""The ``property`` column of a ``spark_mq`` read (option ``propertyColumns``): named message properties
as the fields of a struct, ``property STRUCT<region: STRING, ...>``, each a message's value (null when it
has none; the last one when named twice, as the brokers and Java's map read it).

Why a struct beside the ``properties`` map: PySpark 4.2 pushes no filter on a map element to a Python
data source (``properties['region'] = 'eu'`` reaches ``pushFilters`` as ``IsNotNull(properties)`` only;
``element_at`` and ``map_contains_key`` likewise) but does push filters on struct fields
(``property.region = 'eu'`` arrives as ``EqualTo(("property", "region"), "eu")``), which
:mod:`spark_mq.spark.pushdown` turns into the brokers' SQL92 filter.

The column is built on the executors from the ``properties`` map the decoder gives, so a read asks the
decoder for ``properties`` when it asks for ``property``.

Thread-safety: constants and pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType

from spark_mq.arrow.schema import UTC_SCHEMA

PROPERTY_COLUMN = "property"
PROPERTIES_COLUMN = "properties"


def spark_field(names: Sequence[str]) -> StructField:
    """The ``property`` column of the source's schema: one nullable STRING field per name."""
    return StructField(PROPERTY_COLUMN, StructType([StructField(n, StringType(), True) for n in names]), True)


def decoded_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The message columns a read of ``columns`` decodes: ``properties`` in place of ``property``."""
    if PROPERTY_COLUMN not in columns:
        return tuple(columns)
    return tuple(dict.fromkeys(PROPERTIES_COLUMN if c == PROPERTY_COLUMN else c for c in columns))


def with_property_column(batches: Iterable[pa.RecordBatch], columns: Sequence[str], names: Sequence[str]
                         ) -> Iterator[pa.RecordBatch]:
    """``batches`` (in the decoded columns, :func:`decoded_columns`) as ``columns``: the ``property``
    struct built from ``properties``. Unchanged when ``columns`` has no ``property``."""
    if PROPERTY_COLUMN not in columns:
        yield from batches
        return
    struct = pa.struct([pa.field(n, pa.string()) for n in names])
    schema = pa.schema([pa.field(PROPERTY_COLUMN, struct) if c == PROPERTY_COLUMN else UTC_SCHEMA.field(c)
                        for c in columns])
    import pyarrow.compute as pc  # lazy import: the driver's per-query runner never needs it
    for batch in batches:
        props = batch.column(PROPERTIES_COLUMN)
        values = pa.StructArray.from_arrays([pc.map_lookup(props, n, "last") for n in names], fields=list(struct))
        yield pa.RecordBatch.from_arrays([values if c == PROPERTY_COLUMN else batch.column(c) for c in columns],
                                         schema=schema)
