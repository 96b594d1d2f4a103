"""The ``spark_mq`` Python data source, as Spark's ``KafkaSourceProvider``: its name, its schema
(:mod:`spark_mq.spark.schema`; a ``.schema(...)`` naming some of its columns prunes the read), options
validated up front (:mod:`spark_mq.spark.options`), and the readers and writers it hands out: the batch
reader (:mod:`spark_mq.spark.batch`), the micro-batch stream (:mod:`spark_mq.spark.stream`) and the sink
(:mod:`spark_mq.spark.sink`).

A catalog table (``CREATE TABLE orders USING spark_mq OPTIONS (...)``) keeps its options in the schema
the source gives at CREATE TABLE, since PySpark 4.2 hands a table's reads its stored schema but not its
options (see :mod:`spark_mq.spark.schema`); a read takes them from there, under the query's own.

The data source object is a plain picklable value: no socket or thread is stored on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from spark_mq.common.errors import ConfigError
from spark_mq.spark.options import SourceOptions, table_options
from spark_mq.spark.schema import options_of_table, source_columns, source_schema, with_table_options

if TYPE_CHECKING:
    from spark_mq.spark.batch import SparkMQBatchReader

NAME = "spark_mq"


class SparkMQDataSource(DataSource):
    """``spark.read.format("spark_mq").option("namesrv", ...).option("topic", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # a clear error at load(), before anything is planned. load() does not say whether a
        # batch or a stream follows, so options valid for either pass here; reader() and
        # streamReader() then apply their own mode's rules
        try:
            opts = SourceOptions.parse(self.options)
        except ConfigError:
            opts = SourceOptions.parse(self.options, streaming=True)
        schema = source_schema(opts.property_columns)
        stored = table_options(self.options)  # a CREATE TABLE's: kept with the table, in its schema
        return schema if stored is None else with_table_options(stored, schema)

    def _read_options(self, schema: StructType) -> dict[str, str]:
        """A catalog table's options (from its stored ``schema``) overridden by the query's own (keys lower-cased,
        as Spark gives them)."""
        return {**options_of_table(schema), **{key.lower(): value for key, value in self.options.items()}}

    # the readers' and writers' modules are imported when asked for (each "lazy import: " below): each Python
    # process Spark starts for a query (the stream's runner, the planners) imports only its own, not the sink's
    # producer and the rest
    def reader(self, schema: StructType) -> SparkMQBatchReader:
        # lazy import: only a query of this kind needs it (see above)
        from spark_mq.spark.batch import SparkMQBatchReader, SparkMQFilteringReader
        from spark_mq.spark.pushdown import called_by_pushdown_planner

        opts = SourceOptions.parse(self._read_options(schema))
        # a user's .schema(...) (some of the columns) prunes what is read
        columns = source_columns(schema, opts.property_columns)
        reader = SparkMQFilteringReader if called_by_pushdown_planner() else SparkMQBatchReader
        return reader(opts, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # lazy import: only a query of this kind needs it (see above)
        from spark_mq.spark.stream import SparkMQStreamReader

        opts = SourceOptions.parse(self._read_options(schema), streaming=True)
        return SparkMQStreamReader(opts, source_columns(schema, opts.property_columns))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # lazy import: only a query of this kind needs it (see above)
        from spark_mq.spark.sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # lazy import: only a query of this kind needs it (see above)
        from spark_mq.spark.sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=True)


def register(spark: SparkSession) -> None:
    """Register the ``spark_mq`` data source with ``spark`` (not needed when the ``pyspark_spark_mq``
    package is installed: Spark finds its ``DefaultSource`` by itself)."""
    spark.dataSource.register(SparkMQDataSource)
