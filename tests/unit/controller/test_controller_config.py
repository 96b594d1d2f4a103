"""The controller's configuration: the shipped files load, the embedded controller takes its keys
from namesrv.conf and shares the NameServer's port, and mistakes name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_mq.cli import build_parser
from spark_mq.common.config import ControllerConfig, NamesrvConfig, load_config, load_namesrv_config
from spark_mq.common.errors import ConfigError

CONF = Path(__file__).resolve().parents[3] / "conf"


def test_shipped_controller_and_namesrv_confs_load():
    assert load_config(ControllerConfig, CONF / "controller.conf") == ControllerConfig()
    namesrv, controller = load_namesrv_config(CONF / "namesrv.conf")
    assert controller is None and not namesrv.enable_controller_in_namesrv


def test_the_embedded_controller_reads_its_keys_from_namesrv_conf_and_shares_the_port(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9999\nscanNotActiveBrokerInterval=700\nenableControllerInNamesrv=true\n"
                    "enableElectUncleanMaster=true\ncontrollerStorePath=/srv/ctl\n")
    namesrv, controller = load_namesrv_config(conf)
    assert namesrv == NamesrvConfig(listen_port=9999, scan_not_active_broker_interval=700,
                                    enable_controller_in_namesrv=True)
    assert controller == ControllerConfig(listen_port=9999, scan_not_active_broker_interval=700,
                                          enable_elect_unclean_master=True, controller_store_path="/srv/ctl")


def test_the_state_store_keys_load_with_rocketmq_names(tmp_path):
    conf = tmp_path / "controller.conf"
    conf.write_text("controllerType=zookeeper\nzookeeperConnectString=10.0.0.1:2181, zk2.example:2182\n"
                    "zookeeperRootPath=/prod/controller\nzookeeperSessionTimeoutMills=4000\n")
    assert load_config(ControllerConfig, conf) == ControllerConfig(
        controller_type="zookeeper", zookeeper_connect_string="10.0.0.1:2181, zk2.example:2182",
        zookeeper_root_path="/prod/controller", zookeeper_session_timeout_mills=4000)


EMBEDDED = "enableControllerInNamesrv=true\n"


@pytest.mark.parametrize("text, named", [
    (f"{EMBEDDED}electMasterMaxRetryCount=0\n", "electMasterMaxRetryCount=0"),
    (f"{EMBEDDED}enableElectUncleanMastr=true\n", "did you mean 'enableElectUncleanMaster'"),
    ("controllerHeartBeatTimeoutMills=5\n", "unknown config key 'controllerHeartBeatTimeoutMills'"),
    (f"{EMBEDDED}controllerType=DLedger\n", "controllerType=DLedger: give zookeeper or file"),
    (f"{EMBEDDED}controllerType=zookeeper\n",
     "controllerType=zookeeper: the controller embedded in the NameServer keeps its state in controllerStorePath only"),
    (f"{EMBEDDED}zookeeperConnectString=\n", "zookeeperConnectString='': give every ZooKeeper member as host:port"),
    (f"{EMBEDDED}zookeeperConnectString=127.0.0.1\n", "zookeeperConnectString='127.0.0.1': give every ZooKeeper"),
    (f"{EMBEDDED}zookeeperConnectString=a:2181,,b:2181\n", "zookeeperConnectString='a:2181,,b:2181'"),
    (f"{EMBEDDED}zookeeperConnectString=a:70000\n", "zookeeperConnectString='a:70000'"),
    (f"{EMBEDDED}zookeeperConnectString=a:2181/chroot\n", "zookeeperConnectString='a:2181/chroot'"),
    (f"{EMBEDDED}zookeeperRootPath=spark\n", "zookeeperRootPath='spark': give an absolute znode path"),
    (f"{EMBEDDED}zookeeperRootPath=/\n", "zookeeperRootPath='/'"),
    (f"{EMBEDDED}zookeeperRootPath=/a/\n", "zookeeperRootPath='/a/'"),
    (f"{EMBEDDED}zookeeperRootPath=/a//b\n", "zookeeperRootPath='/a//b'"),
    (f"{EMBEDDED}zookeeperRootPath=/a/../b\n", "zookeeperRootPath='/a/../b'"),
    (f"{EMBEDDED}zookeeperSessionTimeoutMills=0\n", "zookeeperSessionTimeoutMills=0: give a positive number of ms"),
])
def test_mistakes_name_the_key(tmp_path, text, named):
    """Through namesrv.conf's embedded controller: the standalone controller's file is the same ControllerConfig."""
    conf = tmp_path / "namesrv.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_namesrv_config(conf)


def test_controller_help_documents_the_state_store_keys():
    sub = next(a for a in build_parser("controller")._actions if a.dest == "command")
    text = sub.choices["controller"].format_help()
    for line in ("controllerType=zookeeper|file", "controllerStorePath=DIR", "zookeeperConnectString=H:P,...",
                 "zookeeperRootPath=/PATH", "zookeeperSessionTimeoutMills=MS"):
        assert line in text
    assert "(default 127.0.0.1:2181)" in text and "Default: file" in text
