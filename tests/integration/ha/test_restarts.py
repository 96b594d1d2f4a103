"""Restarts of a replicating pair (issue 14): the master, the slave, or both (in either order), stopped
cleanly or SIGKILLed, also in the middle of a transfer (a proxy cuts the HA stream inside a unit: the slave
holds its first bytes).
Afterwards replication goes on from the slave's own end (the master's log names the offset it was
asked for), both commitlogs are byte-identical (an independent reader of the files), SYNC_MASTER
sends are acknowledged again, and no acknowledged message is stored twice or lost."""

from __future__ import annotations

import bisect
import re
import struct
from collections import Counter
from collections.abc import Callable

import pytest
from broker._support import send_header
from servers import wait_until

from spark_mq.client.results import SendStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties

from .commitlog_files import BODY_LEN, FIXED, read_commitlog
from .conftest import Pair
from .test_replication import QUEUES, REPLICATION_TIMEOUT_S, make_topic, replicated, send_batches, slave_connected

SMALL_TRANSFERS = "haTransferBatchSize=1000\n"  # a transfer rarely ends where a unit does


def connects(pair) -> list[int]:
    """The offsets the master was asked to stream from, one per slave connection, in order."""
    return [int(x) for x in re.findall(r"HA: slave \S+ connected at commitlog offset (\d+)", pair.master.log())]


def send_acked(api, pair, topic: str, ledger: list[bytes], count: int) -> None:
    """``count`` sends to the master, each answered SEND_OK (a SYNC_MASTER: the slave has it) before the next
    (after a restart, only once the slave has connected again: before, SLAVE_NOT_AVAILABLE is right)."""
    for _ in range(count):
        body = f"m{len(ledger)}".encode()
        result = api.send_message(pair.master.addr, send_header(topic, len(ledger) % QUEUES), body)
        assert result.status == SendStatus.SEND_OK, result.status
        ledger.append(body)


def assert_ledger_once(pair, ledger: list[bytes]) -> None:
    """Both commitlogs byte-identical, holding every acknowledged message exactly once."""
    m, s = replicated(pair)
    counts = Counter(u.body for u in s.units)
    assert [b for b in ledger if b not in counts] == []  # lost
    assert [b for b, n in counts.items() if n > 1] == []  # stored twice
    assert [u.body for u in m.units] == [u.body for u in s.units] == ledger


def reconnected_at(pair, count: int) -> int:
    """Wait for the slave's ``count``-th connection; the offset it asked for."""
    wait_until(lambda: len(connects(pair)) >= count, REPLICATION_TIMEOUT_S, f"slave connection #{count}")
    return connects(pair)[count - 1]


def replicating_sync_master(ha_pair, api) -> tuple[Pair, str, list[bytes], int]:
    """A SYNC_MASTER and its slave with 100 acknowledged messages replicated: the pair, the topic, the
    ledger and the end of both commitlogs."""
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    ledger: list[bytes] = []
    send_acked(api, pair, topic, ledger, 100)
    m, _ = replicated(pair)
    return pair, topic, ledger, m.end


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_restarted_master_goes_on_from_its_slaves_end(ha_pair, api, how):
    pair, topic, ledger, end = replicating_sync_master(ha_pair, api)

    pair.master.stop() if how == "stop" else pair.master.kill()
    pair.master.start_again()
    assert reconnected_at(pair, 2) == end  # from the slave's end: nothing streamed again
    send_acked(api, pair, topic, ledger, 100)
    assert_ledger_once(pair, ledger)
    assert "Traceback" not in pair.slave.log() + pair.master.log()


@pytest.mark.parametrize("first", ["master", "slave"])
def test_both_restarted_go_on_from_the_slaves_end(ha_pair, api, first):
    pair, topic, ledger, end = replicating_sync_master(ha_pair, api)

    last_unit = read_commitlog(pair.slave.store).units[-1].offset
    pair.slave.kill()
    pair.master.kill()
    order = (pair.master, pair.slave) if first == "master" else (pair.slave, pair.master)
    for broker in order:
        broker.start_again()
    # a slave's recovery after a crash drops its last unit (it may be cut off): the master sends that one again
    assert reconnected_at(pair, 2) == last_unit < end
    send_acked(api, pair, topic, ledger, 100)
    assert_ledger_once(pair, ledger)


def unit_boundaries(pair) -> set[int]:
    m = read_commitlog(pair.master.store)
    return {u.offset for u in m.units} | set(m.files) | {m.end}


def unit_interiors(pair, after_body: bool = False) -> Callable[[int], bool]:
    """Whether an offset falls inside one of the master's message units (not at its start, nor in a blank
    tail; ``after_body``: past its body, in its topic or properties, which no CRC covers)."""
    m = read_commitlog(pair.master.store)
    spans = []  # (first offset inside, the unit's end), increasing
    for u in m.units:
        base = u.offset - u.offset % m.file_size
        (size,) = struct.unpack_from(">i", m.files[base], u.offset - base)
        body_end = u.offset + FIXED.size + BODY_LEN.size + len(u.body)
        spans.append((body_end + 1 if after_body else u.offset + 1, u.offset + size))
    firsts = [first for first, _ in spans]

    def inside(offset: int) -> bool:
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset < spans[i][1]
    return inside


def start_cut_mid_unit(pair, api, tmp_path, namesrv, ha_proxy, after_body: bool = False) -> int:
    """Start the slave, replicating through a proxy that passes the master's transfers whole until one that
    ends inside a message unit past half the master's commitlog (``after_body``: past the unit's body), then
    nothing more: the slave holds only the first bytes of that unit. Its end (the cut) once it has them."""
    proxy = ha_proxy(pair)
    inside, half = unit_interiors(pair, after_body), read_commitlog(pair.master.store).end // 2
    proxy.cut_after(lambda end: end > half and inside(end))
    pair.start_slave(tmp_path, namesrv, f"haMasterAddress={proxy.addr}\n")
    cut = proxy.wait_cut(REPLICATION_TIMEOUT_S)
    wait_until(lambda: int(api.get_broker_runtime_info(pair.slave.addr)["commitLogMaxOffset"]) == cut,
               REPLICATION_TIMEOUT_S, f"the slave to hold the commitlog up to the cut at {cut}")
    return cut


def start_behind(ha_pair, api, long_properties: bool = False):
    """An ASYNC_MASTER of small transfers with ~3 MB for a slave (not started) to copy; with
    ``long_properties`` ~2.5 MB of units that are mostly properties (10-byte bodies, 300-byte keys)."""
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=SMALL_TRANSFERS)
    topic = make_topic(api, pair)
    if long_properties:
        sent = []
        for i in range(400):
            bodies = [b"b%08d" % (i * 16 + j) for j in range(16)]
            props = [encode_properties({"KEYS": f"{i}-{j}-" + "k" * 300}) for j in range(16)]
            assert api.send_batch(pair.master.addr, MessageBatch.of(topic, i % QUEUES, bodies, props),
                                  "ha_producer").status == SendStatus.SEND_OK
            sent += bodies
    else:
        sent = send_batches(api, pair.master.addr, topic, 240, seed=11)
    return pair, sent


def test_a_master_killed_mid_transfer_gives_its_slave_the_rest_of_the_unit_after_a_restart(ha_pair, api, tmp_path,
                                                                                           namesrv, ha_proxy):
    pair, sent = start_behind(ha_pair, api)
    cut = start_cut_mid_unit(pair, api, tmp_path, namesrv, ha_proxy)
    pair.master.kill()
    pair.master.start_again()
    again = reconnected_at(pair, 2)
    last_whole = max(o for o in unit_boundaries(pair) if o <= cut)
    assert last_whole <= again <= cut  # from what the slave has, never from 0
    _, s = replicated(pair)
    assert [u.body for u in s.units] == sent


@pytest.mark.parametrize("how", ["stop", "kill", "kill after the body"])
def test_a_slave_stopped_mid_transfer_resumes_with_the_whole_unit(ha_pair, api, tmp_path, namesrv, ha_proxy, how):
    """A cut after a unit's body leaves the checks of a recovery after a crash nothing to see (the CRC
    covers the body; zeros where properties were are lengths that hold): the slave drops its last unit."""
    after_body = how == "kill after the body"
    pair, sent = start_behind(ha_pair, api, long_properties=after_body)
    cut = start_cut_mid_unit(pair, api, tmp_path, namesrv, ha_proxy, after_body)
    pair.slave.stop() if how == "stop" else pair.slave.kill()
    pair.slave.start_again()  # through the proxy, which passes everything now
    again = reconnected_at(pair, 2)
    assert 0 < again <= cut
    _, s = replicated(pair)
    assert [u.body for u in s.units] == sent
