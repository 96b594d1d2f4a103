"""A half (prepared) message replicated to a slave is in the slave's commitlog, yet invisible to
consumers of its real topic there as on the master; once committed, the slave serves it once."""

from __future__ import annotations

from broker._support import pull_header, send_header
from servers import wait_until

from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.remoting.headers import TRANSACTION_COMMIT_TYPE, EndTransactionRequestHeader

from .commitlog_files import read_commitlog
from .test_replication import QUEUES, make_topic, replicated

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
NO_CHECK = "transactionTimeOut=600000\n"  # no check-back during the test


def visible(api, addr: str, topic: str) -> list[bytes]:
    out = []
    for q in range(QUEUES):
        r = api.pull_message(addr, pull_header("tx_reader", topic, q, 0, max_nums=32))
        if r.status == PullStatus.FOUND:
            out.extend(m.body for m in r.messages())
    return out


def test_half_message_replicated_is_invisible_on_the_slave_until_committed(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", master_conf=NO_CHECK, slave_conf=NO_CHECK)
    topic = make_topic(api, pair)
    group = "tx_ha_producer"
    half = api.send_message(pair.master.addr, send_header(topic, 1, uniq_key="tx-ha-1", group=group,
                                                          props={"TRAN_MSG": "true", "PGROUP": group}), b"half")
    assert half.status == SendStatus.SEND_OK
    _, slave_log = replicated(pair)
    assert [u.body for u in slave_log.units if u.topic == HALF_TOPIC] == [b"half"]
    assert visible(api, pair.slave.addr, topic) == [] and visible(api, pair.master.addr, topic) == []

    api.end_transaction(pair.master.addr, EndTransactionRequestHeader(
        producer_group=group, tran_state_table_offset=half.queue_offset,
        commit_log_offset=parse_offset_msg_id(half.offset_msg_id)[1], commit_or_rollback=TRANSACTION_COMMIT_TYPE,
        msg_id="tx-ha-1", transaction_id="tx-ha-1"))
    wait_until(lambda: visible(api, pair.master.addr, topic) == [b"half"], 30, "the commit on the master")
    replicated(pair)
    assert visible(api, pair.slave.addr, topic) == [b"half"]
    assert [u.topic for u in read_commitlog(pair.slave.store).units if u.body == b"half"].count(topic) == 1
