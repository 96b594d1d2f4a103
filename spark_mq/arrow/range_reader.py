"""A queue's offset range pulled from its broker as Arrow: what the ``spark_mq`` source's executors
and the offload read.

:func:`read_range` opens its own :class:`~spark_mq.arrow.pull_channel.PullChannel` (blocking sockets),
PULL_MESSAGEs the range in batches of ``pull_batch_size`` (the broker also caps a pull by bytes, so it loops),
with the tag expression in the pull header (the broker filters by tag hash) and the exact tags checked again
on the Arrow column, or a SQL92 expression (the broker filters exactly, and answers the next offset past what
it skipped), trims the last batch at the range end and yields ``pyarrow.RecordBatch``es in
:data:`~spark_mq.arrow.schema.UTC_SCHEMA`, or in the :func:`~spark_mq.arrow.schema.utc_schema` of the columns
asked for (the decoder builds only those, plus what the reader itself needs).

Thread-safety: :class:`QueueRange` is a plain picklable value; each :func:`read_range` call opens
(and closes) its own channel.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa

from spark_mq.arrow.decoder import decode_units_to_arrow
from spark_mq.arrow.pull_channel import PullChannel
from spark_mq.arrow.queues import DataLossError, QueueKey, first_answering, queue_key_text, routed_members
from spark_mq.arrow.schema import COLUMNS, to_utc_schema, utc_schema
from spark_mq.client.config import ClientConfig, open_api
from spark_mq.client.queue_pull import pull_header
from spark_mq.client.results import PullStatus
from spark_mq.client.subscription import parse_tags
from spark_mq.common.errors import SparkMQError
from spark_mq.remoting.bodies import EXPRESSION_SQL92, EXPRESSION_TAG, MessageQueue

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
OFFSET_COLUMN = "queue_offset"
TAGS_COLUMN = "tags"


@dataclass(frozen=True)
class QueueSpan:
    """Messages [start, end) of one queue at its broker: what a read (:class:`QueueRange`) and an
    offload's plan (:class:`~spark_mq.tiered.offload.QueuePlan`) are of."""

    topic: str
    broker_name: str
    broker_addr: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> QueueKey:
        return (self.broker_name, self.queue_id)

    @property
    def name(self) -> str:
        return f"{self.topic}@{queue_key_text(self.key)}"


@dataclass(frozen=True)
class QueueRange(QueueSpan):
    """A read of messages [start, end) of one queue: plain, picklable data only."""

    tags: str
    group: str
    pull_batch_size: int
    fail_on_data_loss: bool
    # the broker set's (broker id, address): read the member a pull answer suggests (suggestWhichBrokerId),
    # and the others while one does not answer
    members: tuple[tuple[int, str], ...] = ()
    # a SQL92 expression the pulls carry instead of ``tags`` (it holds the tags: spark_mq.spark.sql_filter)
    sql: str | None = None
    # where the set's members are asked again while none of ``members`` answers (a route read mid-election)
    namesrv_addrs: tuple[str, ...] = ()
    # how the pulls dial and sign (TLS files, account): travels pickled to the executor, which loads the files
    # from the same paths; its repr shows no secret. None: plaintext, unsigned
    client: ClientConfig | None = None


def read_range(part: QueueRange, *, columns: Sequence[str] = COLUMNS,
               timeout: float = REQUEST_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """Pull ``part`` from its broker and yield its messages (tag-filtered) in batches of ``utc_schema(columns)``."""
    tags = parse_tags(part.tags)
    tag_values = pa.array(sorted(tags), pa.string()) if tags is not None else None
    schema = utc_schema(columns)
    # what the reader itself looks at: the offsets (the range end), the tags (the exact tag check)
    looked_at = (OFFSET_COLUMN, TAGS_COLUMN) if tags is not None else (OFFSET_COLUMN,)
    needed = (*columns, *(c for c in looked_at if c not in columns))
    mq = MessageQueue(part.topic, part.broker_name, part.queue_id)
    offset = part.start
    members = dict(part.members)
    addrs = [part.broker_addr, *(a for _, a in part.members if a != part.broker_addr)]
    what = f"queue {part.name}"
    expression, expression_type = (part.tags, EXPRESSION_TAG) if part.sql is None else (part.sql, EXPRESSION_SQL92)
    refresh = partial(_routed_members, part, timeout) if part.namesrv_addrs else None
    with PullChannel(part.client, timeout) as channel:
        while offset < part.end:
            header = pull_header(part.group, mq, offset, min(part.pull_batch_size, part.end - offset), expression,
                                 expression_type=expression_type)
            result = first_answering(addrs, partial(channel.pull_message, header=header), what, refresh)
            suggested = members.get(result.suggest_which_broker_id)
            if suggested is not None and suggested != addrs[0]:  # RocketMQ's pullFromWhichNodeTable
                addrs.remove(suggested)
                addrs.insert(0, suggested)
            if result.status is PullStatus.FOUND:
                batch = decode_units_to_arrow(result.body, broker_name=part.broker_name,  # a vectorised walk
                                              columns=needed, utc=True)
                batch = _rows_in_range(batch, part.end, tag_values)
                if batch.num_rows:
                    yield to_utc_schema(batch, schema)
            elif result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                if part.fail_on_data_loss:
                    raise DataLossError(f"queue {part.name}: offset {offset} is below the broker's min offset "
                                        f"{result.min_offset} (deleted since the query was planned). Set "
                                        f"failOnDataLoss=false to skip ahead")
                log.warning("queue %s: offsets [%d, %d) are gone; skipping ahead (failOnDataLoss=false)",
                            part.name, offset, result.min_offset)
            elif result.status is not PullStatus.NO_MATCHED_MSG:
                raise SparkMQError(f"queue {part.name}: pull at offset {offset} gave {result.status.name} (broker "
                                   f"{part.broker_addr}: min {result.min_offset}, max {result.max_offset}) though "
                                   f"the read was planned up to {part.end}")
            if result.next_begin_offset <= offset:
                raise SparkMQError(f"queue {part.name}: broker {part.broker_addr} gave next offset "
                                   f"{result.next_begin_offset} for a pull at {offset}: no progress")
            offset = result.next_begin_offset


def _routed_members(part: QueueRange, timeout: float) -> list[str]:
    """``part``'s broker set's members as the NameServer routes them now (asked only while none answers)."""
    with open_api(part.client, timeout) as api:
        return routed_members(api, part.namesrv_addrs, part.topic, part.broker_name)


def _rows_in_range(batch: pa.RecordBatch, end: int, tag_values: pa.Array | None) -> pa.RecordBatch:
    """The rows of one pull that belong to the range: queue offsets below ``end`` (ascending within a
    pull, so a zero-copy slice; a tag-filtered pull may run past the end) with exactly the wanted tags
    (the broker filters by tag hash only)."""
    batch = batch.slice(0, int(np.searchsorted(batch.column(OFFSET_COLUMN).to_numpy(), end)))
    if tag_values is None:
        return batch
    import pyarrow.compute as pc  # lazy import: the driver's per-query runner never needs it
    return batch.filter(pc.fill_null(pc.is_in(batch.column(TAGS_COLUMN), value_set=tag_values), False))
