"""Master/slave replication between real broker processes (issue 14, its first slice): a slave copies
its master's commitlog byte for byte (checked by an independent reader of the files), builds its
own consume queues from it (pulls from the slave), resumes from its own end after a restart, and
refuses sends; a SYNC_MASTER acknowledges only what a slave has.

Topic configs are not replicated yet (the slave's metadata sync is a later slice): each test
creates its topic on both brokers, as an admin would."""

from __future__ import annotations

import random
import re
import socket
import struct
import threading

import pytest
from broker._support import pull_header, send_header
from servers import Broker, unique, wait_until

from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.properties import encode_properties
from spark_mq.remoting.codes import ResponseCode

from ._support import SMALL_FILES
from .commitlog_files import Commitlog, read_commitlog

QUEUES = 4
REPLICATION_TIMEOUT_S = 20.0


def make_topic(api, pair) -> str:
    topic = unique("Ha")
    for b in (pair.master, pair.slave):
        if b is not None:
            api.create_topic(b.addr, topic, QUEUES, QUEUES)
    return topic


def send_batches(api, addr: str, topic: str, batches: int, seed: int) -> list[bytes]:
    """``batches`` batches of 16 messages of 50-1500 random bytes with keys, over the queues; the bodies
    in the order sent (the commitlog's order: the sends are sequential)."""
    rng = random.Random(seed)
    sent = []
    for i in range(batches):
        bodies = [rng.randbytes(rng.randrange(50, 1500)) for _ in range(16)]
        props = [encode_properties({"KEYS": f"k{seed}-{i}-{j}", "TAGS": "t"}) for j in range(16)]
        result = api.send_batch(addr, MessageBatch.of(topic, i % QUEUES, bodies, props), "ha_producer")
        assert result.status == SendStatus.SEND_OK
        sent += bodies
    return sent


def replicated(pair) -> tuple[Commitlog, Commitlog]:
    """Both commitlogs once the slave's is byte-identical to the master's, from the first byte to the
    master's last unit (an independent reader of the files)."""
    def same():
        m, s = read_commitlog(pair.master.store), read_commitlog(pair.slave.store)
        if m.end and s.end == m.end and s.files.keys() == m.files.keys() and s.span(0, m.end) == m.span(0, m.end):
            return m, s
        return None
    return wait_until(same, REPLICATION_TIMEOUT_S, "the slave's commitlog to equal the master's")


def slave_connected(pair) -> None:
    wait_until(lambda: "HA: slave" in pair.master.log() and " connected at commitlog offset" in pair.master.log(),
               REPLICATION_TIMEOUT_S, "the slave to connect to the master's HA port")


def test_async_master_slave_is_byte_identical_and_serves_pulls(ha_pair, api, namesrv):
    pair = ha_pair("ASYNC_MASTER")
    topic = make_topic(api, pair)
    sent = send_batches(api, pair.master.addr, topic, 24, seed=1)

    m, s = replicated(pair)
    assert len(m.files) >= 3  # files ended by blank tails replicated too
    assert [u.body for u in s.units] == sent
    assert all(u.physical_offset == u.offset for u in s.units)

    route = api.get_route_info(namesrv, topic)
    assert route is not None
    [data] = [b for b in route.broker_datas if b.broker_name == pair.name]
    assert data.broker_addrs == {0: pair.master.addr, 1: pair.slave.addr}

    # the slave built its own consume queues: a pull by its address returns the replicated messages
    for q in range(QUEUES):
        expected = [u.body for u in m.units if u.queue_id == q]
        got: list[bytes] = []
        while len(got) < len(expected):
            result = api.pull_message(pair.slave.addr, pull_header("ha_reader", topic, q, len(got), max_nums=64))
            assert result.status == PullStatus.FOUND
            got += [msg.body for msg in result.messages(check_crc=True)]
        assert got == expected


def test_sync_master_answers_send_ok_only_for_what_the_slave_has(ha_pair, api):
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    for i in range(12):
        body = f"sync-{i}".encode() * (i + 1)
        result = api.send_message(pair.master.addr, send_header(topic, i % QUEUES), body)
        assert result.status == SendStatus.SEND_OK
        phys = parse_offset_msg_id(result.offset_msg_id)[1]
        # acknowledged: the slave's own files hold it already, at the same offset
        on_slave = {u.offset: u for u in read_commitlog(pair.slave.store).units}
        assert phys in on_slave and on_slave[phys].body == body
    replicated(pair)


def test_sync_master_without_a_slave_answers_slave_not_available(ha_pair, api, tmp_path, namesrv):
    pair = ha_pair("SYNC_MASTER", with_slave=False)
    topic = make_topic(api, pair)
    result = api.send_message(pair.master.addr, send_header(topic, 0), b"no slave yet")
    assert result.status == SendStatus.SLAVE_NOT_AVAILABLE
    # stored on the master all the same (RocketMQ's meaning: durability on a slave not confirmed)
    pulled = api.pull_message(pair.master.addr, pull_header("ha_reader", topic, 0, 0))
    assert [m.body for m in pulled.messages()] == [b"no slave yet"]

    pair.start_slave(tmp_path, namesrv)
    api.create_topic(pair.slave.addr, topic, QUEUES, QUEUES)
    slave_connected(pair)
    result = api.send_message(pair.master.addr, send_header(topic, 0), b"with a slave")
    assert result.status == SendStatus.SEND_OK
    _, s = replicated(pair)
    assert [u.body for u in s.units] == [b"no slave yet", b"with a slave"]


def test_a_slave_refuses_sends_naming_its_master(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER")
    topic = make_topic(api, pair)
    wait_until(lambda: "HA: master of" in pair.slave.log(), REPLICATION_TIMEOUT_S, "the slave to learn its master")
    with pytest.raises(MQClientError) as e:
        api.send_message(pair.slave.addr, send_header(topic, 0), b"to the slave")
    assert e.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert pair.master.addr in e.value.remark and "slave" in e.value.remark
    assert read_commitlog(pair.slave.store).units == []  # nothing stored


def test_a_restarted_slave_resumes_from_its_own_end(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER")
    topic = make_topic(api, pair)
    sent = send_batches(api, pair.master.addr, topic, 8, seed=2)
    first, _ = replicated(pair)

    pair.slave.stop()
    sent += send_batches(api, pair.master.addr, topic, 8, seed=3)
    pair.slave.start_again()
    second, s = replicated(pair)
    assert second.end > first.end and [u.body for u in s.units] == sent
    starts = [int(x) for x in re.findall(r"replicating from master \S+ from commitlog offset (\d+)", pair.slave.log())]
    assert starts[0] == 0 and starts[-1] == first.end  # the restart asked for what it lacked, not from 0

    pair.slave.kill()  # a crash: recovery of the slave's store is the store's own
    sent += send_batches(api, pair.master.addr, topic, 8, seed=4)
    pair.slave.start_again()
    third, s = replicated(pair)
    assert [u.body for u in s.units] == sent
    starts = [int(x) for x in re.findall(r"replicating from master \S+ from commitlog offset (\d+)", pair.slave.log())]
    assert 0 < starts[-1] <= third.end


def test_a_slave_ahead_of_its_master_is_refused_not_merged(ha_pair, api, tmp_path, namesrv):
    """A store that was a master's (it holds bytes the new master never wrote) attached as a slave."""
    was_master = Broker(namesrv, tmp_path / "slave", f"{SMALL_FILES}brokerRole=ASYNC_MASTER\n",
                        broker_name=unique("old"))
    topic = unique("Old")
    api.create_topic(was_master.addr, topic, 1, 1)
    for i in range(5):
        assert api.send_message(was_master.addr, send_header(topic, 0), b"old %d" % i).status == SendStatus.SEND_OK
    was_master.stop()
    before = read_commitlog(was_master.store)

    pair = ha_pair("ASYNC_MASTER", with_slave=False)
    pair.start_slave(tmp_path, namesrv)  # the same store directory, now as the new master's slave
    # its last unit is not the master's, but it is longer: it reports its end, which the master refuses
    wait_until(lambda: "past this master's end 0" in pair.master.log(), REPLICATION_TIMEOUT_S,
               "the master to refuse the diverged slave")
    assert "was it written to as a master?" in pair.master.log()
    assert "past its master's end 0" in pair.slave.log()
    after = read_commitlog(pair.slave.store)
    assert after.files == before.files and len(after.units) == 5


class RawSlave:
    """RocketMQ's HA protocol spoken by the test itself over a plain socket: 8-byte big-endian offset
    reports up, (offset int64, size int32) headers and commitlog bytes down."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def report(self, offset: int) -> None:
        self.sock.sendall(struct.pack(">q", offset))

    def read_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the master closed the HA connection"
            out += chunk
        return out

    def receive(self) -> tuple[int, bytes]:
        """The next transfer that carries bytes (heartbeats skipped)."""
        while True:
            offset, size = struct.unpack(">qi", self.read_exactly(12))
            if size:
                return offset, self.read_exactly(size)


def test_sync_master_times_out_on_a_slave_that_does_not_acknowledge(ha_pair, api):
    pair = ha_pair("SYNC_MASTER", with_slave=False)
    topic = make_topic(api, pair)
    slave = RawSlave(pair.ha_port)
    try:
        slave.report(0)
        wait_until(lambda: " connected at commitlog offset 0" in pair.master.log(), REPLICATION_TIMEOUT_S,
                   "the master to take the raw slave")
        result = api.send_message(pair.master.addr, send_header(topic, 0), b"never acknowledged")
        assert result.status == SendStatus.FLUSH_SLAVE_TIMEOUT  # after syncFlushTimeout (3 s here)
        # the master streamed the unit all the same, as its files hold it
        offset, data = slave.receive()
        assert offset == 0 and data == read_commitlog(pair.master.store).span(0, len(data))
        slave.report(len(data))  # acknowledged late: that put has had its answer

        def acknowledge_next() -> None:  # the next put is released once the slave reports its bytes
            offset, more = slave.receive()
            slave.report(offset + len(more))

        acker = threading.Thread(target=acknowledge_next, daemon=True)
        acker.start()
        result = api.send_message(pair.master.addr, send_header(topic, 0), b"acknowledged")
        acker.join(10)
        assert result.status == SendStatus.SEND_OK
    finally:
        slave.sock.close()
