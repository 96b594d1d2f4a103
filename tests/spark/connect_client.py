"""A Spark Connect client of the ``spark_mq`` source, run by test_spark_sql_connect.py in its own process
(a Connect client has no JVM; its ``pyspark`` functions switch to Connect for the whole process):
``python connect_client.py <sc://url> <namesrv> <topic> <out topic> <checkpoint dir>``. Prints one JSON
object with what each read, stream and write gave."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_mq.spark import SparkMQDataSource


def main(url: str, namesrv: str, topic: str, out_topic: str, checkpoint: str) -> dict:
    spark = SparkSession.builder.remote(url).getOrCreate()
    out: dict = {"session": type(spark).__module__, "errors": {}}

    def source(reader, name):
        return reader.format("spark_mq").option("namesrv", namesrv).option("topic", name)

    def step(name, run):
        try:
            out[name] = run()
        except Exception as e:  # reported to the test, which names the step that failed
            out["errors"][name] = f"{type(e).__name__}: {e}"[:2000]

    df = source(spark.read, topic).load()
    step("rows", lambda: [[r.queue_id, r.queue_offset, r.tags]
                          for r in df.orderBy("queue_id", "queue_offset").collect()])
    step("tagA", lambda: df.where(F.col("tags") == "tagA").count())

    def registered():
        spark.dataSource.register(SparkMQDataSource)  # the class travels pickled to the server
        return source(spark.read, topic).load().count()

    def sql():
        spark.sql(f"CREATE TEMPORARY VIEW connect_orders USING spark_mq OPTIONS (namesrv '{namesrv}', "
                  f"topic '{topic}')")
        try:
            return spark.sql("SELECT count(*) AS n FROM connect_orders WHERE tags = 'tagA'").first().n
        finally:
            spark.sql("DROP VIEW IF EXISTS connect_orders")

    def write():
        df.select("body", "tags").write.format("spark_mq").mode("append").option("namesrv", namesrv) \
            .option("topic", out_topic).save()
        return source(spark.read, out_topic).load().count()

    def stream(sink, name, **options):
        rows = source(spark.readStream, topic).option("startingOffsets", "earliest").load()
        writer = (rows if sink == "memory" else rows.select("body", "tags")).writeStream
        if sink == "memory":
            writer = writer.format("memory").queryName(name)
        else:
            writer = writer.format("spark_mq").option("namesrv", namesrv).option("topic", out_topic)
        query = writer.option("checkpointLocation", f"{checkpoint}/{name}").trigger(availableNow=True).start()
        if not query.awaitTermination(120):
            query.stop()
            raise TimeoutError(f"stream {name} did not finish")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))

    def streamed():
        stream("memory", "connect_stream")
        return spark.sql("SELECT count(*) AS n FROM connect_stream").first().n

    def streamed_to_sink():
        stream("spark_mq", "connect_sink")
        return source(spark.read, out_topic).load().count()

    step("registered", registered)
    step("sql_tagA", sql)
    step("written", write)
    step("streamed", streamed)
    step("streamed_to_sink", streamed_to_sink)
    spark.stop()
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
