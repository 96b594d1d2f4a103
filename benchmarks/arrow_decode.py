"""Decoding a PULL_MESSAGE body (commitlog units back to back) to one Arrow RecordBatch.

Builds a body of ``--messages`` units (100-byte bodies, TAGS + KEYS + UNIQ_KEY properties,
round-robin over 4 queues; building is not timed: ``--pool`` distinct units are encoded and
tiled, then every unit's commitlog and queue offsets are patched to be unique), then times
``decode_units_to_arrow`` ``--reps`` times (median reported) in three ways:

  walk + decode   starts=None: unit starts found by the decoder's vectorised walk
  decode          starts given (as the consume queue gives them)
  pull-sized      walk + decode of a ``--pull-units`` body (the Spark source's default pullBatchSize),
                  repeated until ``--messages`` units are decoded: the shape read_range sees, where
                  the fixed cost per call counts
  pull-sized, pruned / Spark form
                  the same with only the columns of spark_ingest.py's pruned schema, and with every
                  column in the Spark read's form (UTC timestamps, as read_range asks for them)

    .venv/bin/python benchmarks/arrow_decode.py [--messages 1000000] [--reps 5] [--quick] [--json out.json]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MB,
    TOPIC,
    Timer,
    body,
    code_version,
    dump_json,
    machine_line,
    median_of,
    message_properties,
    parser,
    print_table,
    rate,
    spread,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_SECONDS_PER_MILLION = 1.0  # the issue: "decoding 1,000,000 messages runs in well under a second"


def build_pull_body(messages: int, pool: int = 1024, queues: int = 4, body_size: int = 100) -> bytes:
    """``messages`` units as a pull body: ``pool`` distinct messages encoded once, tiled, and
    every unit's commitlog offset (its position) and queue offset patched to be its own."""
    from spark_mq.common.message import MessageBatch, pack_host
    from spark_mq.common.unit.encode import encode_batch
    from spark_mq.common.unit.layout import field_offset
    from spark_mq.remoting.message_batch_codec import split_pull_body

    pool = max(queues, min(pool, messages))
    per_queue = -(-pool // queues)
    parts = []
    for q in range(queues):
        ids = range(q * per_queue, (q + 1) * per_queue)
        batch = MessageBatch.of(TOPIC, q, [body(i, body_size) for i in ids], [message_properties(i) for i in ids],
                                born_host=pack_host("10.0.0.21", 53114))
        parts.append(encode_batch(batch, 0, 0, 1_700_000_000_000, pack_host("10.0.0.7", 10911)).data)
    unit = np.frombuffer(b"".join(parts), dtype=np.uint8)
    unit_starts = split_pull_body(unit.tobytes())
    copies = -(-messages // unit_starts.size)
    total_units = unit_starts.size * copies
    keep_units = messages
    end = (np.append(unit_starts[1:], unit.size))[(keep_units - 1) % unit_starts.size] + (
        (keep_units - 1) // unit_starts.size) * unit.size
    data = np.tile(unit, copies)[: int(end)].copy()
    starts = (unit_starts[None, :] + (np.arange(copies) * unit.size)[:, None]).reshape(total_units)[:keep_units]
    for field, values in (("physical_offset", starts), ("queue_offset", np.arange(keep_units) // queues)):
        at = starts[:, None] + field_offset(field) + np.arange(8)
        data[at] = values.astype(">i8").view(np.uint8).reshape(-1, 8)
    return data.tobytes()


def decode(data: bytes, starts: np.ndarray | None, messages: int, calls: int = 1, **kwargs: Any) -> dict[str, Any]:
    """``calls`` decodes of ``data`` (``messages`` units in all), ``kwargs`` passed on (columns, utc)."""
    from spark_mq.arrow.decoder import decode_units_to_arrow

    with Timer() as t:
        for _ in range(calls):
            batch = decode_units_to_arrow(data, starts, broker_name="broker-a", **kwargs)
    assert batch.num_rows * calls == messages, (batch.num_rows, calls, messages)
    return {"seconds": t.seconds, "cpu_s": t.seconds * t.cpu_share, "cpu_share": t.cpu_share,
            "msg_s": rate(messages, t.seconds), "mb_s": rate(len(data) * calls / MB, t.seconds)}


def main() -> None:
    from spark_ingest import PRUNED_COLUMNS

    from spark_mq.remoting.message_batch_codec import split_pull_body
    from spark_mq.spark.options import DEFAULT_PULL_BATCH_SIZE

    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="units in the pull body")
    p.add_argument("--reps", type=int, default=5, help="decodes per mode; the median is reported")
    p.add_argument("--pool", type=int, default=1024, help="distinct units tiled to build the body")
    p.add_argument("--pull-units", type=int, default=DEFAULT_PULL_BATCH_SIZE, help="units per body, pull-sized mode")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps = 50_000, 1
    data = build_pull_body(a.messages, a.pool)
    starts = split_pull_body(data)
    pull = build_pull_body(min(a.pull_units, a.messages), a.pool)
    calls = max(1, a.messages // a.pull_units)
    pull_units = min(a.pull_units, a.messages)
    decode(pull, None, pull_units)  # warm-up
    modes = {
        "walk + decode": lambda _i: decode(data, None, a.messages),
        "decode (starts given)": lambda _i: decode(data, starts, a.messages),
        f"pull-sized: {calls:,} x {pull_units:,} units": lambda _i: decode(pull, None, calls * pull_units, calls),
        "pull-sized, pruned": lambda _i: decode(pull, None, calls * pull_units, calls, columns=PRUNED_COLUMNS),
        "pull-sized, Spark form (UTC)": lambda _i: decode(pull, None, calls * pull_units, calls, utc=True),
    }
    results = {}
    for mode, run in modes.items():
        med, runs = median_of(a.reps, run, key=lambda r: r["msg_s"])
        results[mode] = {**med, "runs_msg_s": [r["msg_s"] for r in runs]}

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    target = 1_000_000 / TARGET_SECONDS_PER_MILLION
    rows = [[mode, r["seconds"], r["cpu_s"], r["msg_s"], spread(r["runs_msg_s"]), r["mb_s"], r["cpu_share"],
             r["msg_s"] / target] for mode, r in results.items()]
    print_table(f"decode_units_to_arrow of {a.messages:,} units ({len(data) / MB:,.0f} MB), median of {a.reps}",
                ("mode", "seconds", "CPU s", "msg/s", "min..max msg/s", "MB/s", "CPU", "/ target 1M msg/s"), rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "bytes": len(data), "decode": results})


if __name__ == "__main__":
    main()
