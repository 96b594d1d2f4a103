"""The ``spark_mq`` source's schema as Spark sees it: the message schema's UTC form
(:data:`~spark_mq.arrow.schema.UTC_SCHEMA`, timestamps as Spark ``TIMESTAMP``s), the one schema every
DataFrame of the package has (the source, the archive read by Spark, the queries, with a column added).

A user may pass some of these columns (``.schema("body BINARY, store_timestamp TIMESTAMP")``): the
source then decodes and ships only those (:func:`source_columns` checks the schema). Spark gives a
Python data source no other column pruning (no pushed projection), so this is how a reader that wants
four columns avoids paying for eighteen.

A catalog table's options travel in its schema (:func:`with_table_options`): PySpark 4.2 plans a
``SELECT`` from a Python data source table with the table's stored schema but the query's options only
(``PythonDataSourceV2.getTable`` drops the table's properties), so ``CREATE TABLE ... USING spark_mq
OPTIONS (...)`` stores its options in the metadata of the schema's first column and the reads take them
from there (:func:`options_of_table`).

Thread-safety: constants and pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DataType, StructField, StructType

from spark_mq.arrow.schema import UTC_SCHEMA
from spark_mq.common.errors import ConfigError
from spark_mq.spark.property_column import spark_field


def _ddl(typ: DataType) -> str:
    """A Spark type as DDL spells it (``MAP<STRING, STRING>``)."""
    return typ.simpleString().upper().replace(",", ", ")


SPARK_SCHEMA: StructType = from_arrow_schema(UTC_SCHEMA)


def schema_ddl(schema: StructType) -> str:
    """``schema`` spelled for people, in error messages (what .schema(...) would have to say)."""
    return ", ".join(f"{f.name} {_ddl(f.dataType)}" for f in schema)


SCHEMA_DDL = schema_ddl(SPARK_SCHEMA)
TABLE_OPTIONS_KEY = "spark_mq.options"  # the column metadata key holding a catalog table's options


def source_schema(property_columns: Sequence[str] = ()) -> StructType:
    """The source's schema: ``SPARK_SCHEMA``, with the struct column ``property`` of ``property_columns`` (option
    ``propertyColumns``) when it names any."""
    if not property_columns:
        return SPARK_SCHEMA
    return StructType([*SPARK_SCHEMA.fields, spark_field(property_columns)])


def with_table_options(options: Mapping[str, str], schema: StructType = SPARK_SCHEMA) -> StructType:
    """``schema`` carrying a catalog table's ``options`` in its first column's metadata."""
    first, *rest = schema.fields
    return StructType([StructField(first.name, first.dataType, first.nullable, {TABLE_OPTIONS_KEY: dict(options)}),
                       *rest])


def options_of_table(schema: StructType) -> dict[str, str]:
    """The options :func:`with_table_options` put in ``schema`` ({} in any other schema)."""
    return dict(schema.fields[0].metadata.get(TABLE_OPTIONS_KEY, {})) if schema.fields else {}


def source_columns(schema: StructType, property_columns: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns ``schema`` (the source's own, or a user's ``.schema(...)``) asks for, in its order;
    ``ConfigError`` naming every unknown column, wrong type, duplicate or NOT NULL (the source's
    columns are nullable and Spark checks every batch against the schema exactly) and listing the
    valid columns and types (``property`` among them with ``property_columns``)."""
    full = source_schema(property_columns)
    if schema == full:
        return tuple(full.names)
    ours = {f.name: f.dataType for f in full}
    problems = []
    seen: set[str] = set()
    for field in schema:
        typ = ours.get(field.name)
        if typ is None:
            problems.append(f"unknown column {field.name!r}")
        elif field.dataType != typ:
            problems.append(f"column {field.name!r} is {_ddl(typ)}, not {_ddl(field.dataType)}")
        elif not field.nullable:
            problems.append(f"column {field.name!r} must be nullable (drop NOT NULL)")
        elif field.name in seen:
            problems.append(f"column {field.name!r} is named twice")
        seen.add(field.name)
    if not schema.fields:
        problems.append("no column named")
    if problems:
        raise ConfigError(f"the spark_mq source cannot give the schema passed to .schema(...): {'; '.join(problems)}. "
                          f"Name any of its columns, with these types, in any order: {schema_ddl(full)}")
    return tuple(schema.names)
