"""A Spark driver of its own (UI on, event log on) that reads, streams and writes a topic with the options
``accessKey``/``secretKey``, creates a catalog table with them (its reads take the secret from the environment or
their own options), and dumps everything a user or an operator could
look at: ``explain`` of each plan, ``DESCRIBE TABLE EXTENDED``, ``SHOW CREATE TABLE``, the UI's REST API
(environment, SQL executions with their plans, jobs, stages) and HTML pages (environment, SQL), and a copy of the
table written as Parquet (whose footers hold Spark's schema). The event log is written under ``<out>/events``;
the dumps under ``<out>/dumps``, the copy under ``<out>/table_copy``. Run by ``test_spark_credentials.py``:

    python redaction_driver.py NAMESRV TOPIC ACCESS_KEY SECRET OUT SINK_TOPIC
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from pyspark.sql import SparkSession


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode("utf-8", "replace")


def main() -> None:
    namesrv, topic, access_key, secret, out, sink_topic = sys.argv[1:7]
    out_dir = Path(out)
    dumps = out_dir / "dumps"
    dumps.mkdir(parents=True)
    (out_dir / "events").mkdir()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_MQ_SECRET_KEY"] = secret  # before the JVM starts: its planner workers inherit it
    spark = (SparkSession.builder.master("local[2]").appName("spark_mq-redaction")
             .config("spark.ui.enabled", "true").config("spark.ui.port", "0")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(out_dir / "events"))
             .config("spark.eventLog.compress", "false").config("spark.eventLog.rolling.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.retainedExecutions", "100")
             .getOrCreate())
    account = {"accessKey": access_key, "secretKey": secret}
    plans: list[str] = []

    batch = spark.read.format("spark_mq").option("namesrv", namesrv).option("topic", topic).options(**account).load()
    plans.append(batch._jdf.queryExecution().toString())
    count = batch.count()

    stream = (spark.readStream.format("spark_mq").option("namesrv", namesrv).option("topic", topic)
              .option("startingOffsets", "earliest").options(**account).load())
    query = stream.writeStream.format("memory").queryName("redaction_stream").trigger(availableNow=True).start()
    query.awaitTermination(120)
    plans.append(query._jsq.explainInternal(True))
    plans.append(json.dumps(query.lastProgress, default=str))
    streamed = spark.sql("SELECT count(*) AS n FROM redaction_stream").first().n

    written = batch.select("body").limit(3)
    written.write.format("spark_mq").option("namesrv", namesrv).option("topic", sink_topic).options(**account) \
        .mode("append").save()

    spark.sql(f"CREATE TABLE redaction_table USING spark_mq OPTIONS (namesrv '{namesrv}', topic '{topic}', "
              f"accessKey '{access_key}', secretKey '{secret}')")
    table_count = spark.sql("SELECT count(*) AS n FROM redaction_table").first().n  # the secret: the environment
    assert spark.read.option("secretKey", secret).table("redaction_table").count() == table_count  # or the query's
    spark.table("redaction_table").write.parquet(str(out_dir / "table_copy"))  # Spark's schema in every footer
    plans.append(spark.sql("SELECT * FROM redaction_table")._jdf.queryExecution().toString())
    described = "\n".join(" | ".join(str(c) for c in row)
                          for row in spark.sql("DESCRIBE TABLE EXTENDED redaction_table").collect())
    show_create = spark.sql("SHOW CREATE TABLE redaction_table").first()[0]

    (dumps / "plans.txt").write_text("\n\n".join(plans))
    (dumps / "describe.txt").write_text(described)
    (dumps / "show_create.txt").write_text(show_create)
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    api = f"{ui}/api/v1/applications/{app}"
    for name, path in (("environment", "/environment"), ("sql", "/sql?details=true&planDescription=true"),
                       ("jobs", "/jobs"), ("stages", "/stages?details=true")):
        (dumps / f"rest_{name}.json").write_text(fetch(api + path))
    for name, path in (("environment", "/environment/"), ("sql", "/SQL/")):
        (dumps / f"page_{name}.html").write_text(fetch(ui + path))
    for i in range(int(json.loads(fetch(api + "/sql"))[-1]["id"]) + 1):  # every SQL execution's page
        (dumps / f"page_sql_{i}.html").write_text(fetch(f"{ui}/SQL/execution/?id={i}"))
    spark.stop()
    print(json.dumps({"count": count, "streamed": streamed, "table_count": table_count}), flush=True)


if __name__ == "__main__":
    main()
