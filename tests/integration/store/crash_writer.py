"""Writer subprocess for the crash and corruption tests.

Opens a MessageStore on ``--root`` and appends messages (single puts and batches, several
topics and queues, keys and tags, bodies that encode a sequence number). After each put that
returns PUT_OK it writes one JSON ack line to stdout with one ``write`` call::

    {"t": topic, "q": queue, "o": first queue offset, "n": count, "s": [seq...],
     "p": [physical offset...], "z": [unit size...], "k": keyed}

The first line is ``{"ready": true, "recovery": {...}}``. With ``--count N`` it stops after N
messages, prints ``{"done": true, ...}`` and waits to be killed (it never shuts down cleanly).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time

from _support import body_for, emit, key_for, store_config, tag_for

from spark_mq.common.message import Message, MessageBatch
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import PutStatus

TOPICS = ("crashA", "crashB", "crash_C")
QUEUES = 4



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--seq-start", type=int, required=True)
    ap.add_argument("--flush", default="SYNC_FLUSH")
    ap.add_argument("--checkpoint-ms", type=int, default=100)
    ap.add_argument("--count", type=int, default=0, help="stop after this many messages (0: never)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--max-body", type=int, default=900)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    cfg = store_config(args.root, flush_disk_type=args.flush, flush_interval_consume_queue=args.checkpoint_ms)
    store = MessageStore(cfg).start()
    emit({"ready": True, "pid": os.getpid(), "recovery": dataclasses.asdict(store.recovery)})
    seq = args.seq_start
    written = 0
    while not args.count or written < args.count:
        topic = rng.choice(TOPICS)
        qid = rng.randrange(QUEUES)
        n = 1 if rng.random() < 0.4 else rng.randint(1, args.max_batch)
        if args.count:
            n = min(n, args.count - written)
        seqs = list(range(seq, seq + n))
        seq += n
        keyed = rng.random() < 0.7
        msgs = [
            Message(topic, body_for(s, rng.randint(13, args.max_body)), tags=tag_for(s),
                    keys=[key_for(s)] if keyed else None, properties={"seq": str(s)})
            for s in seqs
        ]
        if n == 1 and rng.random() < 0.5:
            res = store.put_message(msgs[0], qid, uniq_key=f"U{seqs[0]}")
        else:
            res = store.put_messages(MessageBatch.from_messages(msgs, qid))
        if res.status != PutStatus.PUT_OK:
            print(f"put returned {res.status}", file=sys.stderr, flush=True)
            continue
        written += n
        emit({"t": topic, "q": qid, "o": res.queue_offset, "n": n, "s": seqs, "k": keyed,
              "p": res.physical_offsets.tolist(), "z": res.sizes.tolist()})
    emit({"done": True, "written": written})
    while True:  # wait for SIGKILL: never shut down cleanly
        time.sleep(1)


if __name__ == "__main__":
    main()
