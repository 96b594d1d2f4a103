"""Real brokers with enableControllerMode against real controllers sharing a real ZooKeeper (the follower
listed first in controllerAddr, so registration follows its CONTROLLER_NOT_LEADER): the configured master asks for the
first election, both heartbeat, and a SIGKILLed master's slave is elected (here unclean: the set is the
master alone until the slave caught up) and becomes master."""

from __future__ import annotations

import json

from servers import Broker, free_port, start_namesrv, unique, wait_until

from spark_mq.remoting.bodies import BrokerReplicasInfo
from spark_mq.remoting.codes import RequestCode, ResponseCode

from ._support import FAST_CONF, HEARTBEAT_TIMEOUT_MS, ControllerClient, start_controller


def _view(api: ControllerClient, name: str):
    answer = api.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, json.dumps([name]).encode())
    assert answer.code == ResponseCode.SUCCESS
    return BrokerReplicasInfo.from_json(answer.body).replicas_info_table.get(name)


def test_controller_mode_brokers_register_heartbeat_and_a_dead_masters_slave_is_elected(tmp_path, remoting,
                                                                                         shared_store):
    conf = FAST_CONF + "enableElectUncleanMaster=true\n" + shared_store
    controller = start_controller(tmp_path / "controller", conf)
    api = ControllerClient(remoting, controller.addr).wait_leading()
    follower = start_controller(tmp_path / "follower", conf)  # listed first: redirects
    namesrv = start_namesrv(tmp_path / "namesrv.log", verbose=False)
    name = unique("ctlmode")
    mode = (f"enableControllerMode=true\ncontrollerAddr={follower.addr};{controller.addr}\n"
            f"brokerHeartbeatInterval=300\nsyncBrokerMetadataPeriod=500\ncontrollerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\n")
    master = Broker(namesrv.addr, tmp_path / "master",
                    f"{mode}brokerRole=ASYNC_MASTER\nbrokerId=1\nhaListenPort={free_port()}\n", broker_name=name)
    slave = None
    try:
        slave = Broker(namesrv.addr, tmp_path / "slave", f"{mode}brokerRole=SLAVE\nbrokerId=2\n", broker_name=name)
        view = wait_until(lambda: (v := _view(api, name)) is not None and len(v.not_in_sync_replicas) == 1
                          and all(r.alive for r in v.in_sync_replicas + v.not_in_sync_replicas) and v,
                          timeout=60, what="both brokers registered and alive")
        assert (view.master_broker_id, view.master_address, view.master_epoch) == (1, master.addr, 1)
        assert [(r.broker_id, r.broker_address) for r in view.not_in_sync_replicas] == [(2, slave.addr)]
        assert f"registered with the controller at {controller.addr}" in master.log()  # followed the redirect
        wait_until(lambda: "master epoch 1" in slave.log(), timeout=30, what="the slave learning the master")

        master.kill()
        view = wait_until(lambda: (v := _view(api, name)).master_broker_id == 2 and v, timeout=60,
                          what="the slave elected")
        assert (view.master_address, view.master_epoch) == (slave.addr, 2)
        wait_until(lambda: "now ASYNC_MASTER (id 0 at the NameServers)" in slave.log(), timeout=30,
                   what="the slave becoming master")
    finally:
        if slave is not None:
            slave.stop_if_running()
        master.stop_if_running()
        namesrv.stop_cleanly()
        follower.stop_cleanly()
        controller.stop_cleanly()
