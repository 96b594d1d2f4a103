"""The broker's steps for a one-message send, in one process: Python and C calls and CPU per send (issue 27).

What ``SendProcessor.send`` runs for a SEND_MESSAGE_V2 of one 100-byte message with a Java producer's
properties, up to the put's result and the answer's msgId: the header's decode, the one-message batch, the
properties read once (prepared? delayed or timed?), the put (``put_all``, the store's whole append) and the
offset msg id. A real store (ASYNC_FLUSH) in a temp dir; no network, no event loop: the steps alone.

* **calls per send**: Python functions and C functions called (``sys.setprofile``): the same on any machine
  and any load, the count a change to the path moves.
* **hot CPU us per send**: sends back to back, this process's CPU (min of the reps).
* **cold CPU us per send**: a 16 MiB buffer walked between sends (as the latency row's other processes
  evict the broker's caches between its messages), this thread's CPU around each send (median): what a
  send costs when the broker wakes for it. Both move with the machine's load: compare runs side by side.

    python benchmarks/send_steps.py [--sends 20000] [--reps 5] [--cold 3000]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from _common import parser, print_table, scratch_dir, store_config

TOPIC = "bench_send"
BODY = b"x" * 100
# a Java producer's properties of a plain send (TAGS, KEYS, UNIQ_KEY, WAIT)
PROPERTIES = "TAGS\x01TagA\x02KEYS\x01key-000001\x02UNIQ_KEY\x017F0000010001B4AAC2F0012345678901\x02WAIT\x01true\x02"
BORN_MS = 1_764_374_400_000
EVICT_BYTES = 16 << 20
CACHE_LINE = 64
MAX_DELAY_LEVEL = 18  # the default messageDelayLevel's levels


class _Peer:
    """What the send path reads of a connection: its peer address (the unit's BORNHOST)."""

    peer = "127.0.0.1:40000"


def requests(n: int):
    """``n`` SEND_MESSAGE_V2 requests as a Java producer sends them, to the 4 queues in turn."""
    from spark_mq.remoting.command import RemotingCommand

    return [RemotingCommand(code=310, ext_fields={
        "a": "bench_producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0", "g": str(BORN_MS + i),
        "h": "0", "i": PROPERTIES, "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a"}, body=BODY)
        for i in range(n)]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sends", type=int, default=20_000, help="sends timed back to back, over all reps")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cold", type=int, default=3_000, help="sends timed one by one with the caches evicted")
    args = p.parse_args()
    if args.quick:
        args.sends, args.reps, args.cold = 500, 2, 100

    from spark_mq.broker.processors.send import SendProcessor
    from spark_mq.broker.processors.send_runs import put_all, stored_runs
    from spark_mq.broker.scheduled.timer import TimerLimits
    from spark_mq.broker.transaction.half_messages import is_prepared_transaction
    from spark_mq.common.message_id import joined_offset_msg_ids
    from spark_mq.common.properties import JoinedProperties
    from spark_mq.remoting.headers import parse_send_request_header
    from spark_mq.store.message_store import MessageStore

    timer, peer = TimerLimits(False, 1, 0), _Peer()

    def send(store: MessageStore, cmd) -> str:
        h = parse_send_request_header(cmd.code, cmd.ext_fields)
        batch = SendProcessor._batch(cmd, h, max(h.queue_id, 0), peer)
        props = JoinedProperties(batch.properties)
        is_prepared_transaction(h.sys_flag, props)
        result = put_all(store, stored_runs(batch, MAX_DELAY_LEVEL, timer, props=props))
        return joined_offset_msg_ids(result.store_host, result.physical_offsets) + str(result.end_offset)

    per_rep = max(1, args.sends // args.reps)
    cmds = requests(max(per_rep, args.cold, 1_000))
    with scratch_dir(args.dir, "send_steps") as root:
        store = MessageStore(store_config(Path(root)))
        store.start()
        try:
            for cmd in cmds[:1_000]:  # warm-up: the topic's queues and files, the caches of names
                send(store, cmd)
            calls = [0]

            def count(_frame, event: str, _arg) -> None:
                if event in ("call", "c_call"):
                    calls[0] += 1

            sample = cmds[:100]
            sys.setprofile(count)
            for cmd in sample:
                send(store, cmd)
            sys.setprofile(None)
            per_send_calls = (calls[0] - 1) / len(sample)  # less setprofile(None)'s own call
            hot = []
            for _ in range(args.reps):
                t0 = time.process_time_ns()
                for cmd in cmds[:per_rep]:
                    send(store, cmd)
                hot.append((time.process_time_ns() - t0) / per_rep / 1e3)
            evict = np.ones(EVICT_BYTES, dtype=np.uint8)
            cold = []
            for cmd in cmds[:args.cold]:
                evict[::CACHE_LINE] += 1
                t0 = time.thread_time_ns()
                send(store, cmd)
                cold.append((time.thread_time_ns() - t0) / 1e3)
        finally:
            store.shutdown()
    rows = [("one-message SEND_MESSAGE_V2", f"{per_send_calls:.0f}", f"{min(hot):.1f}",
             " / ".join(f"{v:.1f}" for v in hot), f"{float(np.median(cold)):.1f}")]
    print_table("The broker's steps of a one-message send (header, batch, properties, put, msg id)",
                ["send", "calls per send", "hot CPU us/send (min)", "every rep", "cold CPU us/send (median)"], rows)


if __name__ == "__main__":
    main()
