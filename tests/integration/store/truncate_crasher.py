"""Truncation subprocess for the crash tests: opens the store at ``--root`` (and its epoch file),
cuts it to ``--offset`` as a rejoining slave does (store, then epochs), and SIGKILLs itself at
the step ``--kill-at`` names, so a crash lands at each point of the truncation in turn:

- ``queues``: the checkpoint is lowered, no consume queue cut yet
- ``queues-half``: two consume queues cut, the others not
- ``index``: the index cut, the commitlog untouched
- ``cut``: the commitlog's cut zeroed and fdatasynced, every later file still there
- ``delete``: one later commitlog file deleted, the others still there
- ``bookkeeping``: every file cut, the in-memory state and the final checkpoint not yet
- ``epochs``: the store cut, the epoch file not
- ``done``: everything done; it prints ``{"done": ...}`` and waits for the test's SIGKILL

Prints ``{"ready": true, "pid": ...}`` once the store is open.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from _support import emit, store_config

from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.dispatch import Dispatcher
from spark_mq.store.ha.epoch_file import EpochFile
from spark_mq.store.ha.replica_epochs import open_epochs
from spark_mq.store.index_file import IndexFile
from spark_mq.store.mapped_file import MappedFile
from spark_mq.store.message_store import MessageStore


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_on_call(cls: type, name: str, nth: int, after: bool = False, only=lambda *a: True) -> None:
    """SIGKILL this process at the ``nth`` call of ``cls.name`` that ``only`` admits (before the
    call runs, or right after it with ``after``)."""
    real = getattr(cls, name)
    calls = [0]

    def hooked(self, *args, **kwargs):
        if not only(self, *args):
            return real(self, *args, **kwargs)
        calls[0] += 1
        if calls[0] == nth and not after:
            die()
        out = real(self, *args, **kwargs)
        if calls[0] == nth and after:
            die()
        return out

    setattr(cls, name, hooked)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--offset", type=int, required=True)
    ap.add_argument("--kill-at", required=True)
    ap.add_argument("--index-entries", type=int, required=True, help="maxIndexNum the store was written with")
    args = ap.parse_args()
    store = MessageStore(store_config(args.root, max_index_num=args.index_entries)).start()
    epochs = open_epochs(store)
    emit({"ready": True, "pid": os.getpid()})
    in_commitlog = lambda mf, *a: mf.path.parent.name == "commitlog"  # noqa: E731
    step = args.kill_at
    if step == "queues":
        kill_on_call(ConsumeQueue, "truncate", 1)
    elif step == "queues-half":
        kill_on_call(ConsumeQueue, "truncate", 3)
    elif step == "index":
        kill_on_call(IndexFile, "truncate_past", 1, after=True)
    elif step == "cut":
        kill_on_call(MappedFile, "sync", 1, after=True, only=in_commitlog)
    elif step == "delete":
        kill_on_call(MappedFile, "destroy", 2, only=in_commitlog)
    elif step == "bookkeeping":
        kill_on_call(Dispatcher, "rebuilt", 1)
    elif step == "epochs":
        kill_on_call(EpochFile, "truncate_after", 1)
    end = store.truncate_to(args.offset)
    epochs.truncate_after(end)
    emit({"done": True, "end": end})
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
