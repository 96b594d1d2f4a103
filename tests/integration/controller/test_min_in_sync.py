"""A controller-mode master whose SyncStateSet is smaller than ``minInSyncReplicas`` refuses a send before storing it
(SYSTEM_ERROR "in-sync replicas not enough", as RocketMQ 5): the partition run found such a master, cut off from its
slaves, storing every retry of every refused send (2,468 copies in one run)."""

from __future__ import annotations

from integration.broker._support import send_header
from integration.ha.commitlog_files import read_commitlog
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import TIMEOUT_S, brokers_conf, route

SENDS = 5


def test_a_master_short_of_min_in_sync_replicas_refuses_sends_and_stores_nothing(tmp_path, controller, remoting):
    namesrv = start_namesrv(tmp_path / "namesrv.log", verbose=False)
    name = unique("minisr")
    # a set of one replica: its SyncStateSet is {1}, one short of minInSyncReplicas=2
    broker = Broker(namesrv.addr, tmp_path / "broker", f"{brokers_conf(controller.addr)}brokerId=1\n"
                    "brokerRole=ASYNC_MASTER\nallAckInSyncStateSet=true\nminInSyncReplicas=2\n", broker_name=name)
    try:
        with SyncMQClientAPI(timeout=10.0) as mq:
            wait_until(lambda: route(mq, namesrv.addr, "TBW102", name).get(0) == broker.addr, TIMEOUT_S,
                       "the broker elected")
            topic = unique("MinIsr")
            mq.create_topic(broker.addr, topic, 1, 1)
        end = read_commitlog(broker.store).end
        answers = [remoting.invoke(broker.addr, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, send_header(topic, 0).to_ext_fields(), f"m{i}".encode()), timeout=10)
            for i in range(SENDS)]
    finally:
        broker.stop()
        namesrv.stop_cleanly()
    assert {(a.code, (a.remark or "").split(":")[0]) for a in answers} == {
        (ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")}, [(a.code, a.remark) for a in answers]
    assert "minInSyncReplicas=2" in answers[0].remark
    after = read_commitlog(broker.store)
    assert after.end == end and not [u for u in after.units if u.topic == topic], "a refused send was stored"
