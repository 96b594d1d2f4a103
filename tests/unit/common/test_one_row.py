"""Shared one-element arrays: a one-message batch's columns, equal to fresh ones and never changed by a holder."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mq.common.message import MessageBatch
from spark_mq.common.one_row import one_row
from spark_mq.common.unit.encode import encode_batch, unit_sizes


def test_a_row_is_the_value_shared_and_read_only():
    row = one_row(7, np.int32)
    assert row.dtype == np.int32 and row.tolist() == [7]
    assert one_row(7, np.int32) is row  # made once
    assert one_row(7, np.int64).dtype == np.int64  # one row per dtype
    with pytest.raises(ValueError, match="read-only"):
        row[0] = 8  # a holder cannot change what every other holder reads
    assert one_row(7, np.int32).tolist() == [7]


def test_lone_messages_get_their_own_lengths_and_sizes():
    """Two lone messages of different sizes: each batch's lengths and unit size are its own, and the unit
    encodes as a batch of two built with fresh arrays does for the same message."""
    short = MessageBatch.of("T", 0, [b"ab"], [b"K\x01v\x02"], born_timestamp=5)
    long = MessageBatch.of("T", 0, [b"abcdef"], [b"K\x01value\x02"], born_timestamp=5)
    assert short.body_lengths.tolist() == [2] and long.body_lengths.tolist() == [6]
    assert short.property_lengths.tolist() == [4] and long.property_lengths.tolist() == [8]
    assert int(unit_sizes(long)[0]) - int(unit_sizes(short)[0]) == 8
    pair = MessageBatch.of("T", 0, [b"ab", b"abcdef"], [b"K\x01v\x02", b"K\x01value\x02"], born_timestamp=5)
    both = encode_batch(pair, 1000, 3, 9, bytes(8))
    first = encode_batch(short, 1000, 3, 9, bytes(8))
    second = encode_batch(long, 1000 + len(first.data), 4, 9, bytes(8))
    assert first.data + second.data == both.data
