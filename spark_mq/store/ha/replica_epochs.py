"""A replica's store and its epoch file kept in step across role changes (RocketMQ's
``AutoSwitchHAService`` / ``AutoSwitchHAClient`` store side): open the file beside the store,
record a new master epoch, describe the replica for the epoch comparison, apply a truncation.

The store is cut before the epoch file: a crash between the two leaves epochs starting past
the commitlog's end, which ``open_epochs`` drops at the next start (the reverse order could
leave a longer commitlog whose tail the file credits to an older epoch). Nothing here knows the
network: the HA connection passes the master's ``ReplicaLog`` in.
"""

from __future__ import annotations

import logging

from spark_mq.store.ha.divergence import ReplicaLog, TruncationPlan
from spark_mq.store.ha.epoch_file import FILE_NAME, EpochFile
from spark_mq.store.message_store import MessageStore
from spark_mq.store.store_paths import store_path

log = logging.getLogger(__name__)


def open_epochs(store: MessageStore) -> EpochFile:
    """The store's epoch file (``EpochFileError`` if corrupt), without epochs starting past the
    commitlog's end (a truncation a crash cut short before it reached the file)."""
    epochs = EpochFile(store_path(store.root, FILE_NAME))
    end = store.commitlog.max_offset()
    if epochs.truncate_after(end):
        log.warning("epoch file: epochs starting past the commitlog's end %d dropped (a truncation was cut short)",
                    end)
    return epochs


def begin_epoch(store: MessageStore, epochs: EpochFile, epoch: int) -> None:
    """This replica becomes master in ``epoch``: its writes start at the commitlog's end (call
    before it accepts the first put)."""
    epochs.append(epoch, store.commitlog.max_offset())


def replica_log(store: MessageStore, epochs: EpochFile) -> ReplicaLog:
    return ReplicaLog(store.commitlog.min_offset(), store.commitlog.max_offset(), epochs.entries)


def apply_plan(store: MessageStore, epochs: EpochFile, plan: TruncationPlan) -> int:
    """Cut the store as ``plan`` says, then its epoch history; returns the commitlog's new end.
    A store that keeps nothing forgets every epoch: the master's come with the bytes it copies."""
    end = store.truncate_to(plan.truncate_to)
    epochs.truncate_after(-1 if plan.keeps_nothing else end)
    log.info("replica truncated for case %s: keeps [.., %d), copies from %d", plan.case.value, end,
             plan.replicate_from)
    return end
