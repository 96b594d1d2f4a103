"""Outcomes of store calls: statuses are values (RocketMQ's PutMessageStatus and
GetMessageStatus), data comes back as buffers with offsets, never as per-message objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message_id import offset_msg_ids


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but not yet known durable
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored, no slave acknowledged it within syncFlushTimeout
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored, no slave in sync to wait for (SYNC_MASTER)


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # messages scanned, none passed the tag filter
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # entries point at deleted commitlog files
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: nothing new yet
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below the queue's minimum (retention)
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such topic queue
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@lazy_dataclass(frozen=True)
class PutResult(LazyDataclass):
    status: PutStatus
    queue_offset: int  # queue offset of the first message
    physical_offsets: np.ndarray
    sizes: np.ndarray
    store_timestamp: int
    store_host: bytes
    # the units as the commitlog holds them, when written in one piece (the usual put): a pull woken by the put
    # answers with them, without reading them back
    units: bytes | memoryview | None = None

    @property
    def count(self) -> int:
        return int(self.physical_offsets.size)

    @property
    def end_offset(self) -> int:
        """Commitlog offset just past the last stored unit."""
        return self.physical_offsets.item(-1) + self.sizes.item(-1)  # Python ints: no numpy scalars made

    def msg_ids(self) -> list[str]:
        """offsetMsgIds of the stored messages, in order."""
        return [b.decode() for b in offset_msg_ids(self.store_host, self.physical_offsets).tolist()]


@dataclass(frozen=True)
class GetResult:
    """What a read found: a status, the offsets a consumer goes on from, and the units themselves."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    data: bytes = b""  # the found units, back to back
    # the found units' queue offsets and sizes as a read gave them: numpy arrays, or plain sequences (a result
    # without units, a few units read without numpy); ``queue_offsets``/``sizes`` are them as int64 arrays
    found_offsets: np.ndarray | Sequence[int] = ()
    found_sizes: np.ndarray | Sequence[int] = ()
    # commitlog bytes past the last unit read (RocketMQ's maxOffsetPy - maxPhyOffsetPulling): how far
    # behind the reader is, which decides whether it is sent to a slave
    behind_bytes: int = 0

    @property
    def count(self) -> int:
        return len(self.found_sizes)

    @cached_property
    def queue_offsets(self) -> np.ndarray:
        """``found_offsets`` as int64 (made on first use: a pull's answer needs only ``data`` and ``count``)."""
        return np.asarray(self.found_offsets, dtype=np.int64)

    @cached_property
    def sizes(self) -> np.ndarray:
        """``found_sizes`` as int64."""
        return np.asarray(self.found_sizes, dtype=np.int64)

    def unit_starts(self) -> np.ndarray:
        """Where each unit starts in ``data``."""
        starts = np.zeros(self.sizes.size, dtype=np.int64)
        np.cumsum(self.sizes[:-1], out=starts[1:])
        return starts
