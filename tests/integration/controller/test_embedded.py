"""The controller embedded in a real NameServer process (``enableControllerInNamesrv``): the same
requests on the NameServer's port, next to its route requests, with its state in controllerStorePath."""

from __future__ import annotations

import subprocess
import sys

from servers import NAMESRV_READY, ServerProcess, unique, wait_until

from spark_mq.remoting.codes import RequestCode, ResponseCode

from ._support import FAST_CONF, ControllerClient, Heartbeats
from .conftest import replica_set


def _namesrv(root, conf: str) -> ServerProcess:
    root.mkdir(parents=True, exist_ok=True)
    (root / "namesrv.conf").write_text(conf)
    return ServerProcess(["namesrv", "-c", str(root / "namesrv.conf"), "--port", "0"], root / "namesrv.log",
                         NAMESRV_READY)


def test_a_namesrv_with_the_embedded_controller_elects_and_keeps_serving_routes(tmp_path, remoting):
    store = tmp_path / "controller-state"
    conf = f"enableControllerInNamesrv=true\ncontrollerStorePath={store}\n{FAST_CONF}"
    namesrv = _namesrv(tmp_path / "ns", conf)
    api = ControllerClient(remoting, namesrv.addr).wait_leading()
    heartbeats = Heartbeats(api)
    try:
        name = unique("embedded")
        brokers = replica_set(name)
        for b in brokers:
            assert api.register(b.name, b.broker_id, b.address).code == ResponseCode.SUCCESS
            heartbeats.start(b)
        assert api.elect(name, 0).code == ResponseCode.SUCCESS
        assert api.alter(name, 0, 1, {0, 1, 2}, 1).code == ResponseCode.SUCCESS
        brokers[1].epoch, brokers[1].max_offset = 1, 900
        heartbeats.stop(brokers[0])
        info = wait_until(lambda: (i := api.replica_info(name)).master_id == 1 and i, timeout=60,
                          what="replica 1 elected by the embedded controller")
        assert (info.master_epoch, info.sync_state_set) == (2, {1})

        assert api.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS  # still a NameServer
        assert (store / "state.json").exists()
    finally:
        heartbeats.close()
        namesrv.stop_cleanly()


def test_a_plain_namesrv_serves_no_controller_requests(tmp_path, remoting):
    namesrv = _namesrv(tmp_path / "plain", "")
    try:
        api = ControllerClient(remoting, namesrv.addr)
        assert api.register("b", 0, "127.0.0.1:1").code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        namesrv.stop_cleanly()


def test_controller_keys_without_the_switch_are_refused_at_start(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("enableElectUncleanMaster=true\n")
    done = subprocess.run([sys.executable, "-m", "spark_mq.cli", "namesrv", "-c", str(conf), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown config key 'enableElectUncleanMaster'" in done.stderr
