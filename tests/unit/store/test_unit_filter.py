"""``get_messages(unit_filter=...)``: a filter judging units by their contents (SQL92) — every
matching message is returned once, in queue order, across pulls of any size, with the scan bounded
by bytes as well as by entries, and a window with no match answered NO_MATCHED_MESSAGE past it."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.common.unit.chain import back_to_back_units
from spark_mq.filter.evaluate import Sql92Filter
from spark_mq.store import queue_reader
from spark_mq.store.results import GetStatus

TOPIC = "UnitFilterT"


def read_all(store, f: Sql92Filter, max_count: int) -> tuple[list[bytes], list[GetStatus]]:
    got, statuses, offset = [], [], 0
    while offset < store.get_max_offset(TOPIC, 0):
        res = store.get_messages(TOPIC, 0, offset, max_count, unit_filter=f.match_units)
        statuses.append(res.status)
        if res.status == GetStatus.FOUND:
            batch = StoredBatch.decode(res.data, back_to_back_units(np.frombuffer(res.data, dtype=np.uint8)))
            assert batch.queue_offsets.tolist() == res.queue_offsets.tolist()
            got.extend(batch.bodies)
        assert res.next_begin_offset > offset
        offset = res.next_begin_offset
    return got, statuses


# (bytes read per get, whether a window before the first match is answered on its own): 2,000 bytes
# hold ~20 units, so the first windows end before message 101
@pytest.mark.parametrize("scan_bytes,empty_window", [(queue_reader.UNIT_FILTER_SCAN_BYTES, False), (2_000, True)])
@pytest.mark.parametrize("max_count", [1, 7, 32])
def test_every_match_once_in_order(make_store, monkeypatch, scan_bytes, empty_window, max_count):
    monkeypatch.setattr(queue_reader, "UNIT_FILTER_SCAN_BYTES", scan_bytes)
    store = make_store()
    msgs = [Message(TOPIC, b"m%d" % i, tags="t", properties={"n": str(i)}) for i in range(600)]
    store.put_messages(MessageBatch.from_messages(msgs, 0))
    f = Sql92Filter.compile("n > 100 AND n < 400 AND (n = 101 OR n = 399 OR n BETWEEN 200 AND 210)")
    got, statuses = read_all(store, f, max_count)
    assert got == [b"m%d" % i for i in [101, *range(200, 211), 399]]
    # (a pull past the last match may be answered NO_MATCHED_MESSAGE: a pull judges only until it has enough)
    assert (statuses[0] == GetStatus.NO_MATCHED_MESSAGE) == empty_window


def test_a_pull_judges_about_what_it_returns(make_store):
    """A pull asking for 32 matches, one message in ten matching, reads and judges a few hundred units
    of the 2,000 its window holds, not all of them (each next pull would judge them again)."""
    store = make_store()
    msgs = [Message(TOPIC, b"m%d" % i, properties={"m": "1" if i % 10 == 0 else "0"}) for i in range(2000)]
    store.put_messages(MessageBatch.from_messages(msgs, 0))
    f = Sql92Filter.compile("m = 1")
    judged: list[int] = []

    def counting(data: bytes, sizes: np.ndarray) -> np.ndarray:
        judged.append(sizes.size)
        return f.match_units(data, sizes)

    res = store.get_messages(TOPIC, 0, 0, 32, unit_filter=counting)
    assert res.queue_offsets.tolist() == list(range(0, 320, 10))
    assert res.next_begin_offset == 311
    assert sum(judged) <= 4 * queue_reader.MIN_JUDGED_UNITS < 2000
