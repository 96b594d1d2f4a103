"""The ``sqlFilter`` of a ``spark_mq`` read: a SQL92 expression (RocketMQ's grammar and semantics) the
brokers filter by, so only matching messages cross the network.

Where it is applied:

- pulls (:class:`~spark_mq.arrow.range_reader.QueueRange` ``sql``): each PULL_MESSAGE carries the
  subscription ``expressionType=SQL92`` (AND-ed with option ``tags`` as ``TAGS IN (...)``); the broker
  evaluates it over the candidate units and answers the next offset past the messages it skipped, so
  offsets, a stream's progress and its lag move over filtered-out messages as over delivered ones;
- rows read without a pull (the archive below a broker's min, key-index hits): the same expression
  evaluated here over their ``properties`` (:func:`matching_rows`), with the broker's semantics.

The expression is parsed when the options are (:mod:`spark_mq.spark.options`); before a read plans
anything, :func:`check_brokers` asks every broker of the topic with CHECK_CLIENT_CONFIG whether it
serves it (RocketMQ's ``checkClientInBroker``), so a broker without ``enablePropertyFilter=true``
fails the query on the driver with the broker's reason instead of failing each task.

Thread-safety: pure functions; :func:`check_brokers` uses the caller's client.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from spark_mq.arrow.queues import TopicQueues
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError, MQClientError
from spark_mq.remoting.bodies import CheckClientRequestBody
from spark_mq.remoting.codes import ResponseCode
from spark_mq.spark.options import SQL_FILTER, SourceOptions

PROPERTIES_COLUMN = "properties"
CHECKING_CLIENT = "spark_mq_source"  # the client id CHECK_CLIENT_CONFIG names (brokers only log it)
# what a broker refusing SQL92 altogether (RocketMQ's answer with enablePropertyFilter=false) leaves to do
FILTERING_OFF = (". A broker filters by SQL92 only with enablePropertyFilter=true in its broker.conf; without it, "
                 "filter with option 'tags' at the broker and .where(...) in Spark")


def check_brokers(api: SyncMQClientAPI, queues: TopicQueues, opts: SourceOptions,
                  checked: set[tuple[str, str]] | None = None) -> None:
    """CHECK_CLIENT_CONFIG of the read's SQL92 subscription (``opts.pull_sql``) at each broker of ``queues``
    (once per (topic, address) with ``checked`` remembering those done); ConfigError with the broker's reason
    when one refuses it. Nothing to check without ``sqlFilter``."""
    if opts.pull_sql is None:
        return
    body = CheckClientRequestBody(CHECKING_CLIENT, opts.pull_group, opts.subscription(queues.topic))
    for name, addr in sorted(queues.brokers.items()):
        if checked is not None and (queues.topic, addr) in checked:
            continue
        try:
            api.check_client_config(addr, body)
        except MQClientError as e:
            hint = "" if e.code != ResponseCode.SYSTEM_ERROR else FILTERING_OFF
            raise ConfigError(f"option {SQL_FILTER!r}: broker {name} ({addr}) does not serve this SQL92 filter of "
                              f"topic {queues.topic!r}: {e.remark or e}{hint}") from None
        if checked is not None:
            checked.add((queues.topic, addr))


def matching_rows(batches: Iterable[pa.RecordBatch], expression: str | None) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` (each with a ``properties`` column) that ``expression`` matches, as the broker
    judges them (a property named twice: the last one, as Java's map keeps); all rows when None."""
    if expression is None:
        yield from batches
        return
    import pyarrow.compute as pc  # lazy import: the driver's per-query runner never needs it

    from spark_mq.filter.evaluate import Sql92Filter  # lazy import: nor this (it loads pyarrow.compute)

    sql = Sql92Filter.compile(expression)
    for batch in batches:
        props = batch.column(PROPERTIES_COLUMN)
        columns = {name: pc.map_lookup(props, name, "last") for name in sql.properties}
        kept = batch.filter(pa.array(sql.matches(columns, batch.num_rows)))
        if kept.num_rows:
            yield kept
