"""Decoding a PULL_MESSAGE body (commitlog units back to back) to one Arrow RecordBatch.

Builds a body of ``--messages`` units (100-byte bodies, TAGS + KEYS + UNIQ_KEY properties,
round-robin over 4 queues; building is not timed: ``--pool`` distinct units are encoded and
tiled, then every unit's commitlog and queue offsets are patched to be unique), then times
``decode_units_to_arrow`` ``--reps`` times (median reported) in two ways:

  walk + decode   starts=None: unit starts found by walking the body (split_pull_body)
  decode          starts given (as the consume queue gives them)

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
    from spark_mq.common.message_unit import HEADER, encode_batch
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
        at = starts[:, None] + HEADER.fields[field][1] + np.arange(8)
        data[at] = values.astype(">i8").view(np.uint8).reshape(-1, 8)
    return data.tobytes()


def decode(data: bytes, starts: np.ndarray | None, messages: int) -> dict[str, Any]:
    from spark_mq.spark.arrow_decoder import decode_units_to_arrow

    with Timer() as t:
        batch = decode_units_to_arrow(data, starts, broker_name="broker-a")
    assert batch.num_rows == messages, (batch.num_rows, messages)
    return {"seconds": t.seconds, "cpu_share": t.cpu_share, "msg_s": rate(messages, t.seconds),
            "mb_s": rate(len(data) / MB, t.seconds)}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="units in the pull body")
    p.add_argument("--reps", type=int, default=5, help="decodes per mode; the median is reported")
    p.add_argument("--pool", type=int, default=1024, help="distinct units tiled to build the body")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps = 50_000, 1
    from spark_mq.remoting.message_batch_codec import split_pull_body

    data = build_pull_body(a.messages, a.pool)
    starts = split_pull_body(data)
    decode(data[: int(starts[min(1000, starts.size - 1)])], None, min(1000, starts.size - 1) or 1)  # warm-up
    results = {}
    for mode, given in (("walk + decode", None), ("decode (starts given)", starts)):
        med, runs = median_of(a.reps, lambda _i, g=given: decode(data, g, a.messages), key=lambda r: r["msg_s"])
        results[mode] = {**med, "runs_msg_s": [r["msg_s"] for r in runs]}

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    target = 1_000_000 / TARGET_SECONDS_PER_MILLION
    rows = [[mode, a.messages, r["seconds"], r["msg_s"], spread(r["runs_msg_s"]), r["mb_s"], r["cpu_share"],
             r["msg_s"] / target] for mode, r in results.items()]
    print_table(f"decode_units_to_arrow of a {a.messages:,}-unit pull body ({len(data) / MB:,.0f} MB), "
                f"median of {a.reps}",
                ("mode", "messages", "seconds", "msg/s", "min..max msg/s", "MB/s", "CPU", "/ target 1M msg/s"), rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "bytes": len(data), "decode": results})


if __name__ == "__main__":
    main()
