"""The clean-stop record: what a clean shutdown leaves for the next start to compare against.

A clean shutdown writes the commitlog end and every consume queue's max offset. The next start
reads and removes it. When the checkpoint still says the commitlog ends there (it is taken
right before) and every consume queue loaded with
the same max offset, no queue lost or gained entries while the broker was down: the start
need not walk the commitlog before serving, and checks the units of the last files in the
background instead (a read of units not checked yet checks them itself). Without a record
that matches (none, a crash, a queue whose max differs, a shorter commitlog) the start checks
synchronously and rebuilds what is missing before it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from spark_mq.common.errors import CorruptFileError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

FILE_NAME = "cleanstop"


def _record(commitlog_end: int, queues: Iterable[ConsumeQueue]) -> dict:
    return {"commitlogEnd": commitlog_end,
            "queues": sorted([cq.topic, cq.queue_id, cq.max_offset] for cq in queues)}


def write_clean_stop(path: Path, commitlog_end: int, queues: Iterable[ConsumeQueue]) -> None:
    """Record the state a clean shutdown leaves (written atomically)."""
    JsonConfigFile(path).persist(_record(commitlog_end, queues))


def take_clean_stop(path: Path, commitlog_end: int, queues: Iterable[ConsumeQueue]) -> bool:
    """Whether the record left by the last clean shutdown matches the store as loaded; the
    record is removed either way (a crash must never find a stale one)."""
    if not path.exists():
        return False
    try:
        same = JsonConfigFile(path).load() == _record(commitlog_end, queues)
    except CorruptFileError:
        same = False
    finally:
        path.unlink(missing_ok=True)
    if not same:
        log.warning("store: the consume queues or the commitlog differ from what the last clean shutdown left: "
                    "checking them before serving")
    return same
