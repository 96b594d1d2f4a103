"""`spark-mq namesrv` as a real subprocess, driven over loopback with our remoting client."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from servers import wait_until

from spark_mq.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

EXPIRY_MS = 2000
SCAN_MS = 200


def start_namesrv(tmp: Path) -> tuple[subprocess.Popen, str]:
    conf = tmp / "namesrv.conf"
    conf.write_text(f"listenAddress=127.0.0.1\nlistenPort=9876\nscanNotActiveBrokerInterval={SCAN_MS}\n"
                    f"brokerChannelExpiredTime={EXPIRY_MS}\norderMessageEnable=true\n")
    proc = subprocess.Popen([sys.executable, "-m", "spark_mq.cli", "namesrv", "-c", str(conf), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=open(tmp / "namesrv.log", "w"), text=True)
    line = proc.stdout.readline()
    assert line.startswith("spark-mq namesrv listening on "), (line, (tmp / "namesrv.log").read_text())
    return proc, line.split()[-1]


@pytest.fixture(scope="module")
def namesrv_dir(tmp_path_factory) -> Path:
    """The module NameServer's directory (its config and ``namesrv.log``)."""
    return tmp_path_factory.mktemp("namesrv")


@pytest.fixture(scope="module")
def namesrv(namesrv_dir):
    proc, addr = start_namesrv(namesrv_dir)
    yield addr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


@pytest.fixture
def client():
    with SyncRemotingClient() as c:
        yield c


def register(client, addr, cluster="C1", name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0,
             topics=("T1",), version=(1, 1), ha="127.0.0.1:10912", compressed=False, crc=None, queues=4):
    configs = {t: TopicConfig(t, queues, queues, 6) for t in topics}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(configs, DataVersion(*version)))
    raw = compress(body) if compressed else body.to_json()
    header = {"brokerName": name, "brokerAddr": broker_addr, "clusterName": cluster, "haServerAddr": ha,
              "brokerId": broker_id, "compressed": compressed, "bodyCrc32": crc}
    return client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, header, raw))


def compress(body: RegisterBrokerBody) -> bytes:
    """RocketMQ 4.x's compressed RegisterBrokerBody layout."""
    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    wrapper = body.topic_config_serialize_wrapper
    out = chunk(wrapper.data_version.to_json()) + struct.pack(">i", len(wrapper.topic_config_table))
    for tc in wrapper.topic_config_table.values():
        out += chunk(f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} SINGLE_TAG".encode())
    return zlib.compress(out + chunk(b"[]"), 9)


def call(client, addr, code, **fields):
    return client.invoke(addr, RemotingCommand.request(code, fields))


def route(client, addr, topic):
    return call(client, addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)


def test_register_then_route_cluster_and_topics(namesrv, client):
    resp = register(client, namesrv, cluster="C1", name="b-route", broker_addr="127.0.0.1:20911",
                    topics=("RouteA", "RouteB"))
    assert resp.code == ResponseCode.SUCCESS and "masterAddr" not in resp.ext_fields
    r = route(client, namesrv, "RouteA")
    assert r.code == ResponseCode.SUCCESS
    assert b'"brokerAddrs":{"0":"127.0.0.1:20911"}' in r.body  # standard JSON, id quoted
    doc = json.loads(r.body)
    assert doc["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:20911"}, "brokerName": "b-route",
                                   "cluster": "C1"}]
    (qd,) = doc["queueDatas"]
    assert (qd["brokerName"], qd["readQueueNums"], qd["writeQueueNums"], qd["perm"]) == ("b-route", 4, 4, 6)

    info = json.loads(call(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"]["C1"] == ["b-route"]
    assert info["brokerAddrTable"]["b-route"]["brokerAddrs"] == {"0": "127.0.0.1:20911"}
    topics = json.loads(call(client, namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert {"RouteA", "RouteB"} <= set(topics)
    by_cluster = json.loads(call(client, namesrv, RequestCode.GET_TOPICS_BY_CLUSTER, cluster="C1").body)
    assert {"RouteA", "RouteB"} <= set(by_cluster["topicList"])

    call(client, namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="RouteB")
    assert route(client, namesrv, "RouteB").code == ResponseCode.TOPIC_NOT_EXIST


def test_unknown_topic_has_rocketmqs_remark(namesrv, client):
    r = route(client, namesrv, "NoSuchTopic")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert r.remark == ("No topic route info in name server for the topic: NoSuchTopic"
                        "\nSee http://rocketmq.apache.org/docs/faq/ for further details.")


def test_slave_learns_master_and_unregister_removes_routes(namesrv, client):
    register(client, namesrv, cluster="C2", name="b-ms", broker_addr="127.0.0.1:21911", topics=("MsTopic",),
             ha="127.0.0.1:21912")
    resp = register(client, namesrv, cluster="C2", name="b-ms", broker_addr="127.0.0.1:22911", broker_id=1,
                    topics=("MsTopic",))
    assert resp.ext_fields == {"haServerAddr": "127.0.0.1:21912", "masterAddr": "127.0.0.1:21911"}
    doc = json.loads(route(client, namesrv, "MsTopic").body)
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:21911", "1": "127.0.0.1:22911"}

    for bid, baddr in ((1, "127.0.0.1:22911"), (0, "127.0.0.1:21911")):
        r = call(client, namesrv, RequestCode.UNREGISTER_BROKER, brokerName="b-ms", brokerAddr=baddr,
                 clusterName="C2", brokerId=bid)
        assert r.code == ResponseCode.SUCCESS
    assert route(client, namesrv, "MsTopic").code == ResponseCode.TOPIC_NOT_EXIST
    info = json.loads(call(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert "C2" not in info["clusterAddrTable"] and "b-ms" not in info["brokerAddrTable"]


def test_compressed_body_and_crc(namesrv, client):
    body = compress(RegisterBrokerBody(TopicConfigSerializeWrapper({"Zt": TopicConfig("Zt", 8, 8, 6)},
                                                                   DataVersion(5, 1))))
    bad = register(client, namesrv, name="b-z", broker_addr="127.0.0.1:23911", topics=("Zt",), compressed=True,
                   crc=(zlib.crc32(body) & 0x7FFFFFFF) ^ 1)
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    ok = register(client, namesrv, name="b-z", broker_addr="127.0.0.1:23911", topics=("Zt",), compressed=True,
                  crc=zlib.crc32(body) & 0x7FFFFFFF, version=(5, 1), queues=8)
    assert ok.code == ResponseCode.SUCCESS
    assert json.loads(route(client, namesrv, "Zt").body)["queueDatas"][0]["readQueueNums"] == 8


def test_data_version_query(namesrv, client):
    register(client, namesrv, name="b-dv", broker_addr="127.0.0.1:24911", topics=("DvT",), version=(7, 3))
    hdr = {"brokerName": "b-dv", "brokerAddr": "127.0.0.1:24911", "clusterName": "C1", "brokerId": 0}
    same = client.invoke(namesrv, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, hdr,
                                                          b'{"counter":3,"timestamp":7}'))
    assert same.ext_fields["changed"] == "false" and json.loads(same.body) == {"counter": 3, "timestamp": 7}
    other = client.invoke(namesrv, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, hdr,
                                                           b'{"counter":4,"timestamp":7}'))
    assert other.ext_fields["changed"] == "true"


def test_kv_config(namesrv, client):
    assert call(client, namesrv, RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="v").code == 0
    got = call(client, namesrv, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert (got.code, got.ext_fields["value"]) == (ResponseCode.SUCCESS, "v")
    listed = call(client, namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="NS")
    assert json.loads(listed.body) == {"table": {"k": "v"}}
    call(client, namesrv, RequestCode.DELETE_KV_CONFIG, namespace="NS", key="k")
    missing = call(client, namesrv, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert (missing.code, missing.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: k")
    nons = call(client, namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="Nope")
    assert (nons.code, nons.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: Nope")


def test_order_topic_conf_attached_to_route(namesrv, client):
    register(client, namesrv, name="b-ord", broker_addr="127.0.0.1:25911", topics=("OrdT",))
    call(client, namesrv, RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="OrdT", value="b-ord:4")
    assert json.loads(route(client, namesrv, "OrdT").body)["orderTopicConf"] == "b-ord:4"


def test_bad_requests_get_error_responses(namesrv, client):
    missing = call(client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC)
    assert missing.code == ResponseCode.SYSTEM_ERROR and "'topic' is missing" in missing.remark
    unknown = call(client, namesrv, RequestCode.PULL_MESSAGE)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "11" in unknown.remark
    garbage = client.invoke(namesrv, RemotingCommand.request(
        RequestCode.REGISTER_BROKER, {"brokerName": "x", "brokerAddr": "y", "clusterName": "z", "haServerAddr": "",
                                      "brokerId": 0}, b"{not json"))
    assert garbage.code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody" in garbage.remark
    bad_crc = register(client, namesrv, name="b-crc", broker_addr="127.0.0.1:29911", crc="x1")
    assert bad_crc.code == ResponseCode.SYSTEM_ERROR and "'bodyCrc32' must be a decimal int32" in bad_crc.remark
    assert route(client, namesrv, "NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST  # server still fine


def test_silent_broker_is_evicted_and_heartbeating_one_is_kept(namesrv, namesrv_dir):
    with SyncRemotingClient() as silent, SyncRemotingClient() as beating:
        register(silent, namesrv, cluster="CE", name="b-silent", broker_addr="127.0.0.1:26911", topics=("EvT",))
        register(beating, namesrv, cluster="CE", name="b-beat", broker_addr="127.0.0.1:27911", topics=("EvT",))

        def beat_and_route() -> list[str]:
            register(beating, namesrv, cluster="CE", name="b-beat", broker_addr="127.0.0.1:27911", topics=("EvT",))
            return [b["brokerName"] for b in json.loads(route(beating, namesrv, "EvT").body)["brokerDatas"]]

        wait_until(lambda: beat_and_route() == ["b-beat"], timeout=EXPIRY_MS / 1000 + 10, interval=0.2,
                   what="b-silent evicted while b-beat heartbeats")
        info = json.loads(call(beating, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"]["CE"] == ["b-beat"]
    # evicted by the expiry scan (its connection stayed open until now)
    assert "broker 127.0.0.1:26911 silent for" in (namesrv_dir / "namesrv.log").read_text()


def test_broker_connection_close_evicts_at_once(namesrv, namesrv_dir, client):
    with SyncRemotingClient() as broker:
        register(broker, namesrv, cluster="CX", name="b-gone", broker_addr="127.0.0.1:28911", topics=("GoneT",))
        assert route(client, namesrv, "GoneT").code == ResponseCode.SUCCESS
    wait_until(lambda: route(client, namesrv, "GoneT").code == ResponseCode.TOPIC_NOT_EXIST, what="GoneT unrouted")
    # evicted for its closed connection, not by the expiry scan
    log = (namesrv_dir / "namesrv.log").read_text()
    assert "connection of broker 127.0.0.1:28911 closed: evicting" in log
    assert "broker 127.0.0.1:28911 silent" not in log


def test_sigterm_stops_cleanly_with_clients_connected(tmp_path):
    proc, addr = start_namesrv(tmp_path)
    with SyncRemotingClient() as c:
        assert route(c, addr, "x").code == ResponseCode.TOPIC_NOT_EXIST
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0  # exited while the client is still connected
    assert "stopped" in (tmp_path / "namesrv.log").read_text()
