"""offsetMsgIds: one per offset, and joined as a batch send's response carries them."""

from __future__ import annotations

import numpy as np

from spark_mq.common.message import pack_host
from spark_mq.common.message_id import joined_offset_msg_ids, offset_msg_id, parse_offset_msg_id

HOST = pack_host("10.1.2.3", 10911)


def test_joined_ids_are_each_offsets_id_separated_by_commas():
    offsets = np.array([0, 255, 1 << 40, (1 << 63) - 1], dtype=np.int64)
    joined = joined_offset_msg_ids(HOST, offsets)
    assert joined == ",".join(offset_msg_id(HOST, int(o)) for o in offsets)
    assert [parse_offset_msg_id(i) for i in joined.split(",")] == [(HOST, int(o)) for o in offsets]


def test_one_offset_has_no_comma():
    assert joined_offset_msg_ids(HOST, np.array([4096], dtype=np.int64)) == offset_msg_id(HOST, 4096)
