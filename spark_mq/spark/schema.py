"""The ``spark_mq`` source's schema as Spark sees it: the message schema's UTC form
(:data:`~spark_mq.arrow.schema.UTC_SCHEMA`, timestamps as Spark ``TIMESTAMP``s), the one schema every
DataFrame of the package has (the source, the archive read by Spark, the queries, with a column added).

Thread-safety: constants.
"""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from spark_mq.arrow.schema import UTC_SCHEMA

SPARK_SCHEMA: StructType = from_arrow_schema(UTC_SCHEMA)
# SPARK_SCHEMA spelled for people, in error messages (what .schema(...) would have to say)
SCHEMA_DDL = ", ".join(f"{f.name} {f.dataType.simpleString().upper().replace(',', ', ')}" for f in SPARK_SCHEMA)
