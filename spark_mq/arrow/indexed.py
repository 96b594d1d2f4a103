"""Messages a broker's index answered (QUERY_MESSAGE by key) as Arrow rows of :data:`SCHEMA`.

A key lookup returns a few whole messages, decoded one by one by the client; bulk reads go through
:mod:`spark_mq.arrow.decoder` instead. Kept apart from the archive's lookup
(:mod:`spark_mq.tiered.lookup`) so a Spark reader that pushes a key filter does not import
``pyarrow.dataset`` (and pandas under it) in every Python worker.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from spark_mq.arrow.schema import SCHEMA
from spark_mq.common.message import unpack_host
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY
from spark_mq.common.unit.decode import StoredMessage

DEFAULT_MAX_HOT = 1000  # QUERY_MESSAGE max_num per broker: hits beyond it are dropped (with a warning)
NO_END_MS = (1 << 63) - 1  # QUERY_MESSAGE's end bound for an open window (a Java long)


def is_indexable_key(value: object) -> bool:
    """Whether the broker's index can hold ``value`` as one key: a non-empty string without the KEYS
    separator."""
    return isinstance(value, str) and value != "" and KEY_SEPARATOR not in value


def query_window(begin_ms: int | None, end_ms: int | None) -> tuple[int, int]:
    """A window ``[begin_ms, end_ms)`` (None: open) as QUERY_MESSAGE's inclusive ``[begin, end]`` ms."""
    return (begin_ms if begin_ms is not None else 0), (end_ms - 1 if end_ms is not None else NO_END_MS)


def messages_to_arrow(messages: Sequence[StoredMessage], broker_name: str) -> pa.Table:
    """Messages the broker returned (QUERY_MESSAGE decodes them one by one) as :data:`SCHEMA` rows, the
    columns the Arrow decoder gives a pulled unit. A key lookup returns a few messages; bulk reads go
    through the decoder."""
    rows = [{
        "topic": m.topic, "broker_name": broker_name, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
        "commitlog_offset": m.physical_offset, "msg_id": offset_msg_id(m.store_host, m.physical_offset),
        "uniq_key": m.properties.get(UNIQ_KEY), "keys": m.properties.get(KEYS), "tags": m.properties.get(TAGS),
        "properties": list(m.properties.items()), "body": m.body, "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp, "born_host": unpack_host(m.born_host),
        "store_host": unpack_host(m.store_host), "reconsume_times": m.reconsume_times, "sys_flag": m.sys_flag,
        "flag": m.flag,
    } for m in messages]
    return pa.Table.from_pylist(rows, schema=SCHEMA)
