"""RocketMQ message ids.

offsetMsgId: store host IPv4 (4) + port (4) + commitlog offset (8) as 32 upper-case hex
characters, so a message is found by id with no index (MessageDecoder.createMessageId).
"""

from __future__ import annotations

from functools import cache

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.lazy_numpy import np

FEW_IDS = 16  # joined_offset_msg_ids makes at most this many ids one at a time


@cache
def _hex_table() -> np.ndarray:
    """A byte's 2 upper-case hex characters, per byte value (made on first use)."""
    return np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint16)


def offset_msg_ids(store_host: bytes, physical_offsets: np.ndarray) -> np.ndarray:
    """Ids for many commitlog offsets at once, as a numpy ``S32`` array: the host's 16 hex digits looked up
    once and copied into every row, only the offsets' 8 bytes looked up per row."""
    n = physical_offsets.size
    hex_digits = np.empty((n, 16), dtype=np.uint16)  # a byte's 2 hex characters per item
    hex_table = _hex_table()
    hex_digits[:, :8] = hex_table[np.frombuffer(store_host, dtype=np.uint8)]
    hex_digits[:, 8:] = hex_table[physical_offsets.astype(">i8").view(np.uint8).reshape(n, 8)]
    return hex_digits.view("S32").reshape(n)


def joined_offset_msg_ids(store_host: bytes, physical_offsets: np.ndarray) -> str:
    """``offset_msg_ids`` joined by commas, as a batch send's response names its messages: written
    into one buffer, not a string per message then joined (2,048 ids are 67 KB); a few ids (a small
    batch) one by one, without numpy's fixed cost (~10 us)."""
    n = physical_offsets.size
    if n <= FEW_IDS:
        return ",".join([offset_msg_id(store_host, offset) for offset in physical_offsets.tolist()])
    out = np.full((n, 33), ord(","), dtype=np.uint8)
    out[:, :32] = offset_msg_ids(store_host, physical_offsets).view(np.uint8).reshape(n, 32)
    return out.tobytes()[:-1].decode("ascii")


def offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[bytes, int]:
    """(store host 8 bytes, commitlog offset) of an offsetMsgId."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise MessageValidationError(f"{msg_id!r} is not a message id: expected 32 hex characters")
    return raw[:8], int.from_bytes(raw[8:], "big", signed=True)
