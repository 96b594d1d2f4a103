"""Writer-and-truncator subprocess for the random-kill truncation test: on the store at ``--root``
it writes batches and, every few batches, cuts the store back to one of the units it wrote in
this run, until the test SIGKILLs it. One JSON line per event, each written with one ``write``::

    {"ready": true, "end": commitlog end after recovery}
    {"t": topic, "q": queue, "o": first queue offset, "s": [seq...], "p": [physical offset...]}
    {"truncating": offset}        before truncate_to(offset)
    {"truncated": offset}         after it returned
"""

from __future__ import annotations

import argparse
import random

from _support import body_for, emit, key_for, store_config

from spark_mq.common.message import Message, MessageBatch
from spark_mq.store.message_store import MessageStore

TOPICS = ("cycA", "cycB")
QUEUES = 3



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--seq-start", type=int, required=True)
    ap.add_argument("--index-entries", type=int, required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    store = MessageStore(store_config(args.root, max_index_num=args.index_entries)).start()
    emit({"ready": True, "end": store.commitlog.max_offset()})
    mine: list[int] = []  # units written in this run and still stored: where a cut may go
    seq = args.seq_start
    while True:
        if mine and rng.random() < 0.3:
            cut = rng.choice(mine)
            emit({"truncating": cut})
            store.truncate_to(cut)
            emit({"truncated": cut})
            mine = [p for p in mine if p < cut]
            continue
        topic, qid, n = rng.choice(TOPICS), rng.randrange(QUEUES), rng.randint(1, 16)
        seqs = list(range(seq, seq + n))
        seq += n
        msgs = [Message(topic, body_for(s, rng.randint(13, 1200)), keys=[key_for(s)]) for s in seqs]
        res = store.put_messages(MessageBatch.from_messages(msgs, qid))
        phys = res.physical_offsets.tolist()
        mine += phys
        emit({"t": topic, "q": qid, "o": res.queue_offset, "s": seqs, "p": phys})


if __name__ == "__main__":
    main()
