"""What the client API returns for sends and pulls: statuses as enums, as RocketMQ's client does.

Expected outcomes are values, never exceptions: a send the broker stored but could not flush in
time is ``SendStatus.FLUSH_DISK_TIMEOUT``; a pull that found nothing is ``PullStatus.NO_NEW_MSG``.
The mapping from response codes is RocketMQ's ``MQClientAPIImpl.processSendResponse`` and
``processPullResponse``; any other code raises ``MQClientError``.

Thread-safety: results are immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from spark_mq.common.unit.batch import StoredBatch
from spark_mq.common.unit.chain import back_to_back_units
from spark_mq.common.unit.decode import StoredMessage, decode_messages, decode_whole_units
from spark_mq.common.unit.layout import MESSAGE_MAGIC, MIN_UNIT_SIZE, SIZE_MAGIC, unit_fits_at
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import PullMessageResponseHeader
from spark_mq.remoting.message_batch_codec import split_pull_body


class SendStatus(Enum):
    """RocketMQ's SendStatus. All but SEND_OK mean: stored on the master, durability not confirmed."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


SEND_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True)
class SendResult:
    """One SEND_MESSAGE(_V2) or SEND_BATCH_MESSAGE outcome.

    ``msg_id`` is the client-side UNIQ_KEY (comma-joined for a batch, as Java's SendResult), or
    None when the message carried none; ``offset_msg_id`` is the broker's id (store host +
    commitlog offset; comma-joined for a batch); ``queue_offset`` is the first message's.
    """

    status: SendStatus
    msg_id: str | None
    offset_msg_id: str
    topic: str
    broker_name: str | None
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",") if self.msg_id else []

    @property
    def offset_msg_ids(self) -> list[str]:
        return self.offset_msg_id.split(",") if self.offset_msg_id else []


class PullStatus(Enum):
    """RocketMQ's PullStatus."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # PULL_NOT_FOUND: nothing at or past the offset yet
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # PULL_RETRY_IMMEDIATELY: messages there, none matched the filter
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # PULL_OFFSET_MOVED: offset below min or past max; use next_begin_offset


PULL_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True)
class PullResult:
    """A PULL_MESSAGE outcome; ``body`` holds whole commitlog units back to back (FOUND only)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    body: bytes = b""

    def unit_starts(self, check_crc: bool = False) -> np.ndarray:
        """Start offsets (int64) of the units in ``body``; raises BatchBodyError on a torn body."""
        return pull_body_starts(self.body, check_crc)

    def messages(self, check_crc: bool = False) -> list[StoredMessage]:
        """The units decoded one by one (for tools and tests; bulk readers take ``batch()``)."""
        return decode_units_list(self.body, check_crc)

    def batch(self, check_crc: bool = False) -> StoredBatch:
        """The units as columns (bodies, offsets, timestamps... properties decoded on demand):
        several times faster than ``messages()`` for a large pull. Raises BatchBodyError on a
        torn body; empty unless FOUND."""
        return StoredBatch.decode(bytes(self.body), pull_body_starts(self.body, check_crc))


def pull_result_of(response: RemotingCommand, body: bytes | memoryview) -> PullResult:
    """A PULL_MESSAGE answer whose code is a pull status (in ``PULL_STATUS_BY_CODE``) as a ``PullResult``;
    ``body``: its body, or a view of it for a reader that decodes in place."""
    out = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
    return PullResult(PULL_STATUS_BY_CODE[response.code], out.next_begin_offset, out.min_offset, out.max_offset,
                      out.suggest_which_broker_id, body if response.code == ResponseCode.SUCCESS else b"")


VECTOR_SPLIT_MIN_BYTES = 16 * 1024  # below ~64 units walking them one by one is faster


def pull_body_starts(body: bytes, check_crc: bool = False) -> np.ndarray:
    """``split_pull_body``, without its fixed costs when no CRC check is asked for and the body is
    well formed (the usual case): a large body's units found and checked by numpy without a Python
    step per unit, a small one's (a long-polling consumer's message or few) one by one without numpy's
    fixed costs (~0.05 ms a pull, more than decoding a lone message). Anything else, and any doubt,
    goes through ``split_pull_body``, which says what is wrong."""
    if not check_crc:
        if len(body) >= VECTOR_SPLIT_MIN_BYTES:
            starts = back_to_back_units(np.frombuffer(body, dtype=np.uint8))
        else:
            starts = _small_body_starts(body)
        if starts is not None:
            return starts
    return split_pull_body(body, check_crc)


def _small_body_starts(body: bytes) -> np.ndarray | None:
    """``_whole_unit_starts`` as the array ``pull_body_starts`` returns; None when it finds no unit."""
    starts = _whole_unit_starts(body)
    return np.array(starts, dtype=np.int64) if starts else None


def _whole_unit_starts(body: bytes) -> list[int] | None:
    """The units of a small pull body followed one by one, each checked as ``split_pull_body`` checks it
    (the message magic, a size that fits, lengths adding up to it, the last ending at the body's end);
    None at the first that is not. One pass, no numpy: a long-polling consumer's pull of a few messages."""
    starts: list[int] = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < MIN_UNIT_SIZE:
            return None
        size, magic = SIZE_MAGIC.unpack_from(body, pos)
        if magic != MESSAGE_MAGIC or size < MIN_UNIT_SIZE or size > n - pos or not unit_fits_at(body, pos, pos + size):
            return None
        starts.append(pos)
        pos += size
    return starts


def decode_units_list(body: bytes, check_crc: bool = False) -> list[StoredMessage]:
    """Every unit of a pull/query response body as a StoredMessage."""
    body = bytes(body)
    if not check_crc and len(body) < VECTOR_SPLIT_MIN_BYTES:
        messages = decode_whole_units(body)  # split and decoded in one pass
        if messages is not None:
            return messages
    starts = pull_body_starts(body, check_crc).tolist()
    return decode_messages(body, starts) if starts else []


@dataclass(frozen=True)
class TieredOffset:
    """QUERY_TIERED_OFFSET (a spark_mq extension) for one queue: messages [0, ``offset``) are
    archived (0: none yet); below ``cold_offset`` every message lies in full, non-active commitlog
    files (what an offload job may archive; ``max_offset`` if the active file holds none of the
    queue); [``min_offset``, ``max_offset``) is what the broker still serves."""

    offset: int
    cold_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class RegisterBrokerResult:
    """REGISTER_BROKER response: the master's HA address and master address (slaves only), and
    the ORDER_TOPIC_CONFIG KV table when the NameServer has one."""

    ha_server_addr: str | None
    master_addr: str | None
    kv_table: dict[str, str]
