"""Reads from slaves (issue 14): with ``slaveReadEnable`` a pull reading further behind the commitlog's end
than ``accessMessageInMemoryMaxRatio`` of memory is told to read the slave (suggestWhichBrokerId 1), a
caught-up one the master (0); our consumers follow that and, with the master SIGKILLed, read the slave.

The memory figure is set small (``totalPhysicalMemorySize``) so a few hundred KB make a reader "far behind"."""

from __future__ import annotations

from broker._support import pull_header

from spark_mq.client.results import PullStatus

from .test_replication import QUEUES, make_topic, replicated, send_batches

# 40 % of 100 000 bytes: a reader more than 40 000 commitlog bytes behind the end is "far behind"
SMALL_MEMORY = "totalPhysicalMemorySize=100000\naccessMessageInMemoryMaxRatio=40\n"
SLAVE_READ = f"slaveReadEnable=true\n{SMALL_MEMORY}"
BATCHES = 40
LAST_QUEUE = (BATCHES - 1) % QUEUES  # holds the commitlog's last message: its last offset is caught up


def suggestion(api, addr: str, topic: str, queue_id: int, offset: int) -> int:
    result = api.pull_message(addr, pull_header("ha_reader", topic, queue_id, offset, max_nums=1))
    assert result.status == PullStatus.FOUND
    return result.suggest_which_broker_id


def test_far_behind_reader_is_sent_to_the_slave_only_with_slave_read_enable(ha_pair, api):
    # the master reads from slaves, its slave does not (the same small memory figure on both)
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SMALL_MEMORY)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=3)  # ~500 KB over 4 queues
    replicated(pair)
    q = LAST_QUEUE
    last = api.pull_message(pair.master.addr, pull_header("ha_reader", topic, q, 0, max_nums=1)).max_offset - 1

    assert suggestion(api, pair.master.addr, topic, q, 0) == 1  # far behind: read the slave
    assert suggestion(api, pair.master.addr, topic, q, last) == 0  # caught up: stay on the master
    # slaveReadEnable off: always the master, however far behind
    assert suggestion(api, pair.slave.addr, topic, q, 0) == 0
    assert suggestion(api, pair.slave.addr, topic, q, last) == 0


def test_slave_with_slave_read_enable_sends_a_caught_up_reader_back_to_the_master(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SLAVE_READ)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=4)
    replicated(pair)
    q = LAST_QUEUE
    last = api.pull_message(pair.slave.addr, pull_header("ha_reader", topic, q, 0, max_nums=1)).max_offset - 1
    assert suggestion(api, pair.slave.addr, topic, q, 0) == 1  # still far behind: stay on the slave
    assert suggestion(api, pair.slave.addr, topic, q, last) == 0  # caught up: back to the master
