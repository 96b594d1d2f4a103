"""A ``spark_mq`` stream's lag, read from Spark's own progress (``query.lastProgress``, a
``StreamingQueryListener``'s ``event.progress``).

PySpark 4.2's Python stream readers cannot report source metrics of their own (the driver-side
runner, ``pyspark/sql/streaming/python_streaming_source_runner.py``, serves only offsets,
partitions, commits and read limits), so the lag is not a metric in ``SourceProgress.metrics``.
It is two offsets Spark already shows: ``endOffset`` (where the batch ended, per queue) and
``latestOffset`` (each queue's max offset at the broker when the batch was planned, which the
reader reports through ``reportLatestOffset``). A queue's lag is ``latest - end`` (0 when the broker
went back below it), counted over the queues of ``endOffset`` only: with a ``group`` those are the
queues this query holds.

Offsets are ``{"<broker>:<queueId>": n}`` or, keyed by topic, ``{"<topic>": {"<broker>:<queueId>": n}}``;
queues are named ``<broker>:<queueId>`` or ``<topic>/<broker>:<queueId>`` accordingly.

Thread-safety: pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def queue_offsets(value: Any) -> dict[str, int] | None:
    """Offsets as Spark shows them (a JSON string or a dict; None or "null" when unknown) per queue name."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() not in ("", "null") else None
    if not isinstance(value, Mapping):
        return None
    out: dict[str, int] = {}
    for key, offset in value.items():
        if isinstance(offset, Mapping):
            out.update((f"{key}/{queue}", int(n)) for queue, n in offset.items())
        else:
            out[str(key)] = int(offset)
    return out


def queue_lag(end: Any, latest: Any) -> dict[str, int]:
    """Messages behind the broker's max per queue of ``end`` ({} when either is unknown), sorted by queue."""
    end_d, latest_d = queue_offsets(end), queue_offsets(latest)
    if not end_d or not latest_d:
        return {}
    return {q: max(latest_d.get(q, end_d[q]) - end_d[q], 0) for q in sorted(end_d)}


def source_lag(source: Mapping[str, Any]) -> dict[str, int]:
    """The lag per queue of one ``SourceProgress`` (``progress.sources[i]``, a dict; or the JSON's form)."""
    return queue_lag(source.get("endOffset"), source.get("latestOffset"))
