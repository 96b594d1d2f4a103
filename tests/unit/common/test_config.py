"""Broker configuration: conf/broker.conf loads, and every mistake is a ConfigError that names
the key, so a typo never silently falls back to a default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from spark_mq.common.config import (
    ASYNC_FLUSH,
    BrokerConfig,
    camel_to_snake,
    config_from_properties,
    load_config,
    parse_properties,
    snake_to_camel,
)
from spark_mq.common.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def write_conf(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "broker.conf"
    p.write_text(text)
    return p


def test_shipped_broker_conf_loads():
    cfg = load_config(BrokerConfig, REPO / "conf" / "broker.conf")
    assert cfg.broker_name == "broker-a"
    assert cfg.broker_ip1 == "127.0.0.1"
    assert cfg.listen_port == 10911
    assert cfg.maped_file_size_commit_log == 1024**3
    assert cfg.maped_file_size_consume_queue == 300_000 * 20
    assert cfg.flush_disk_type == ASYNC_FLUSH
    assert cfg.check_crc_on_recover is True
    assert cfg.disk_space_clean_forcibly_ratio == pytest.approx(0.85)


def test_overrides_win_over_the_file(tmp_path):
    p = write_conf(tmp_path, "listenPort=1234\nstorePathRootDir=/nowhere\n")
    cfg = load_config(BrokerConfig, p, store_path_root_dir=str(tmp_path))
    assert cfg.listen_port == 1234 and cfg.root == tmp_path


def test_comments_blank_lines_and_colon_separator(tmp_path):
    p = write_conf(tmp_path, "# comment\n! also a comment\n\n  brokerName : b-1  \nbrokerId=2\nbrokerRole=SLAVE\n")
    cfg = load_config(BrokerConfig, p)
    assert (cfg.broker_name, cfg.broker_id) == ("b-1", 2)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(BrokerConfig) if f.name != "extra"])
def test_every_field_is_settable_by_its_camel_case_name(field):
    camel = snake_to_camel(field)
    assert camel_to_snake(camel) == field
    default = getattr(BrokerConfig(), field)
    cfg = config_from_properties(BrokerConfig, {camel: str(default).lower() if isinstance(default, bool)
                                                else str(default)})
    assert getattr(cfg, field) == default


def test_rocketmq_spellings_map_to_fields():
    assert camel_to_snake("checkCRCOnRecover") == "check_crc_on_recover"
    assert camel_to_snake("brokerIP1") == "broker_ip1"
    assert camel_to_snake("mapedFileSizeCommitLog") == "maped_file_size_commit_log"


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    p = write_conf(tmp_path, "brokerName=a\nflushDiskTyp=SYNC_FLUSH\n")
    with pytest.raises(ConfigError) as e:
        load_config(BrokerConfig, p)
    msg = str(e.value)
    assert "'flushDiskTyp'" in msg and "did you mean 'flushDiskType'" in msg
    assert str(p) in msg


def test_unknown_key_without_close_match_lists_known_keys():
    with pytest.raises(ConfigError, match=r"unknown config key 'zzz'.*known keys: .*brokerName"):
        config_from_properties(BrokerConfig, {"zzz": "1"})


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("listenPort=abc", "listenPort='abc': expected int"),
        ("messageIndexEnable=yes", "messageIndexEnable='yes': expected bool"),
        ("diskSpaceCleanForciblyRatio=high", "diskSpaceCleanForciblyRatio='high': expected float"),
        ("maxMessageSize=4.5", "maxMessageSize='4.5': expected int"),
    ],
)
def test_wrong_types_name_the_key(tmp_path, line, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(BrokerConfig, write_conf(tmp_path, line + "\n"))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("flushDiskType=FOO", "flushDiskType=FOO"),
        ("deleteWhen=25", "deleteWhen='25'"),
        ("deleteWhen=04;25", "deleteWhen='04;25'"),
        ("deleteWhen=four", "deleteWhen='four'"),
        ("mapedFileSizeConsumeQueue=30", "mapedFileSizeConsumeQueue"),
        ("mapedFileSizeCommitLog=1024", "mapedFileSizeCommitLog"),
        ("mapedFileSizeCommitLog=65536\nmaxMessageSize=65536", "maxMessageSize=65536"),
        ("diskSpaceCleanForciblyRatio=0.95\ndiskSpaceWarningLevelRatio=0.9", "diskSpaceCleanForciblyRatio"),
        ("brokerName=../../x", "brokerName='../../x'"),
        ("brokerClusterName=my.cluster", "brokerClusterName='my.cluster'"),
        ("maxFrameSize=100", "maxFrameSize=100"),
        ("serverChannelMaxIdleTimeSeconds=-1", "serverChannelMaxIdleTimeSeconds"),
        ("serverChannelMaxInFlightRequests=0", "serverChannelMaxInFlightRequests"),
        ("writeBufferLowWaterMark=8388608", "writeBufferLowWaterMark (8388608)"),
        ("rebalanceLockMaxLiveTime=0", "rebalanceLockMaxLiveTime=0"),
        ("timerPrecisionMs=0", "timerPrecisionMs"),
        ("timerMaxDelaySec=100000000\ntimerPrecisionMs=1", "timerMaxDelaySec=100000000 at timerPrecisionMs=1"),
        ("mappedFileSizeTimerLog=1000001", "mappedFileSizeTimerLog=1000001: give a positive multiple of 40"),
    ],
)
def test_invalid_values_name_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(BrokerConfig, write_conf(tmp_path, text + "\n"))


def test_valid_delete_when_hours():
    assert BrokerConfig(delete_when="0;4;23").delete_when == "0;4;23"


def test_malformed_line_is_named_by_number():
    with pytest.raises(ConfigError, match="line 2: expected key=value"):
        parse_properties("a=1\njustakey\n")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(BrokerConfig, tmp_path / "absent.conf")


@pytest.mark.parametrize(("props", "says"), [
    ({"brokerRole": "MASTER"}, "brokerRole=MASTER: use one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
    ({"brokerRole": "SLAVE"}, "brokerRole=SLAVE needs brokerId > 0"),
    ({"brokerRole": "SYNC_MASTER", "brokerId": "1"}, "brokerRole=SYNC_MASTER needs brokerId=0"),
    ({"brokerId": "2"}, "brokerRole=ASYNC_MASTER needs brokerId=0"),
    ({"haListenPort": "70000"}, "haListenPort=70000"),
    ({"haTransferBatchSize": "0"}, "haTransferBatchSize"),
    ({"haHousekeepingInterval": "5000"}, "haHousekeepingInterval=5000 must exceed haSendHeartbeatInterval=5000"),
    ({"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": "127.0.0.1"}, "haMasterAddress=127.0.0.1: give "
     "host:port"),
    ({"enableControllerMode": "true", "brokerId": "1", "controllerAddr": "127.0.0.1:9878",
      "haMasterAddress": "127.0.0.1:10912"}, "not with enableControllerMode"),
    ({"accessMessageInMemoryMaxRatio": "150"}, "accessMessageInMemoryMaxRatio=150: give a percentage of RAM"),
    ({"totalPhysicalMemorySize": "-1"}, "totalPhysicalMemorySize=-1"),
    ({"slaveSynchronizeInterval": "0"}, "slaveSynchronizeInterval=0: give a positive number"),
])
def test_replication_keys_are_checked(props, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        config_from_properties(BrokerConfig, props)


def test_replication_defaults_are_rocketmqs():
    cfg = config_from_properties(BrokerConfig, {"listenPort": "20911"})
    assert (cfg.broker_role, cfg.broker_id, cfg.ha_port) == ("ASYNC_MASTER", 0, 20912)
    assert (cfg.ha_send_heartbeat_interval, cfg.ha_housekeeping_interval, cfg.ha_transfer_batch_size,
            cfg.ha_max_gap_not_in_sync) == (5000, 20_000, 32 * 1024, 256 * 1024 * 1024)
    assert cfg.ha_master_address == ""  # as the NameServer says
    assert cfg.slave_synchronize_interval == 10_000
    slave = config_from_properties(BrokerConfig, {"brokerRole": "SLAVE", "brokerId": "1", "haListenPort": "3000"})
    assert slave.is_slave and slave.ha_port == 3000
    assert (cfg.slave_read_enable, cfg.access_message_in_memory_max_ratio) == (False, 40)
    assert 0 < cfg.in_memory_read_bytes  # 40 % of this machine's RAM
    small = config_from_properties(BrokerConfig, {"totalPhysicalMemorySize": "1000"})
    assert small.in_memory_read_bytes == 400
