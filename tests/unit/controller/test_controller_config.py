"""The controller's configuration: the shipped files load, the embedded controller takes its keys
from namesrv.conf and shares the NameServer's port, and mistakes name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize("text, named", [
    ("enableControllerInNamesrv=true\nelectMasterMaxRetryCount=0\n", "electMasterMaxRetryCount=0"),
    ("enableControllerInNamesrv=true\nenableElectUncleanMastr=true\n", "did you mean 'enableElectUncleanMaster'"),
    ("controllerHeartBeatTimeoutMills=5\n", "unknown config key 'controllerHeartBeatTimeoutMills'"),
])
def test_mistakes_name_the_key(tmp_path, text, named):
    conf = tmp_path / "namesrv.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load_namesrv_config(conf)
