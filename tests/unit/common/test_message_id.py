"""offsetMsgIds: one per offset, and joined as a batch send's response carries them (a few one by
one, more in columns: the same string)."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mq.common.message import pack_host
from spark_mq.common.message_id import (
    FEW_IDS,
    joined_offset_msg_ids,
    offset_msg_id,
    offset_msg_ids,
    parse_offset_msg_id,
)

HOST = pack_host("10.1.2.3", 10911)
OFFSETS = [0, 255, 1 << 40, (1 << 63) - 2]


@pytest.mark.parametrize("n", [1, 4, FEW_IDS, FEW_IDS + 1, 100])
def test_joined_ids_are_each_offsets_id_separated_by_commas(n):
    offsets = np.array((OFFSETS * n)[:n], dtype=np.int64) + np.arange(n) % 2
    joined = joined_offset_msg_ids(HOST, offsets)
    assert joined == ",".join(offset_msg_id(HOST, int(o)) for o in offsets)
    assert joined == ",".join(i.decode() for i in offset_msg_ids(HOST, offsets).tolist())
    assert [parse_offset_msg_id(i) for i in joined.split(",")] == [(HOST, int(o)) for o in offsets]


def test_one_offset_has_no_comma():
    assert joined_offset_msg_ids(HOST, np.array([4096], dtype=np.int64)) == offset_msg_id(HOST, 4096)
