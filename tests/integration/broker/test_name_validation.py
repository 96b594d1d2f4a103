"""Hostile names (issue 18, finding 1): a topic, group, broker name or KV key that is a path.

A real NameServer and broker; the broker's store root has a sentinel directory beside it. Every
request code that carries a name is sent, as a raw remoting request, with names that would
climb out of ``consumequeue/<topic>`` (``../``, absolute paths, ``%RETRY%g/../..``), or are
empty, too long, or not ASCII. Each must be refused with the name rule in the remark, and
nothing outside the store root may be created, changed or deleted; the broker keeps serving.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from servers import Broker, unique

from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.remoting.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import pull_header, send_header

SENTINEL = "sentinel"
RULE = "^[%|a-zA-Z0-9_-]+$"  # every refusal names the rule (or the length limit)
LONG = ["T" * 128, "G" * 200]  # over the topic and group limits; a KV namespace or key may have 255
OPTIONAL = {"GET_CONSUME_STATS.topic", "UNREGISTER_CLIENT.producerGroup", "UNREGISTER_CLIENT.consumerGroup",
            "CHECK_CLIENT_CONFIG.group"}


def hostile_names(sentinel: Path) -> list[str]:
    """Names that are paths, or not names: ``consumequeue/<name>`` of most of them leaves the store."""
    up = f"../../../{SENTINEL}"  # from consumequeue/<dir>/ to beside the store root
    return [
        "", ".", "..", "../x", f"g/{up}", f"a/../../{SENTINEL}", f"%RETRY%g/{up}", f"%DLQ%g/{up}",
        "%RETRY%g/../../config", str(sentinel), "/", "/tmp", "a/b", "a\\b", "..\\..\\x", "a\x00b", "a\nb", "abc\n",
        " a", "a b", "a.b", "a@b", "~", "$HOME", "%RETRY%" + "../" * 12 + "tmp", *LONG, "主题", "é",
        "../" * 20 + str(sentinel.parent / "escaped").lstrip("/"),
    ]


def must_refuse(label: str, name: str) -> bool:
    """Whether request field ``label`` must refuse ``name``: all do, but a KV namespace or key may be
    255 bytes long, and an optional name sent empty means none (the C++ client unregisters with
    consumerGroup "")."""
    if label.split(".")[0] in ("PUT_KV_CONFIG", "GET_KV_CONFIG", "DELETE_KV_CONFIG", "GET_KVLIST_BY_NAMESPACE"):
        return name not in LONG
    return name != "" or label not in OPTIONAL


def refused(resp: RemotingCommand) -> bool:
    """An error response whose remark names the rule or the length limit."""
    return resp.code != ResponseCode.SUCCESS and bool(resp.remark) and (RULE in resp.remark or "limit" in resp.remark)


def tree(top: Path, skip: Path, log: Path) -> dict[str, tuple]:
    """Every path under ``top`` but ``skip``: kind, mtime, and for files size and SHA-256 (``log``'s
    content is left out: the broker appends to it)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames if d / n != skip)
        out[str(d)] = ("dir", d.stat().st_mtime_ns, sorted(dirnames), sorted(filenames))
        for n in filenames:
            p = d / n
            st = p.lstat()
            out[str(p)] = ("file",) if p == log else (
                "file", st.st_mtime_ns, st.st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def make_sentinel(root: Path) -> Path:
    """A directory with a file and a subdirectory, beside the store root."""
    sentinel = root / SENTINEL
    (sentinel / "sub").mkdir(parents=True)
    (sentinel / "precious.txt").write_text("must survive\n")
    (sentinel / "sub" / "deeper.bin").write_bytes(os.urandom(64))
    return sentinel


def invoke(raw: SyncRemotingClient, addr: str, code: int, fields: dict[str, object] | None = None,
           body: bytes = b"") -> RemotingCommand:
    return raw.invoke(addr, RemotingCommand.request(code, fields, body))


def heartbeat_body(client_id: str, *, producer: str = "p_ok", consumer: str = "c_ok", topic: str = "T_ok") -> bytes:
    return HeartbeatData(client_id, [ProducerData(producer)],
                         [ConsumerData(consumer, subscription_data_set=[SubscriptionData(topic)])]).to_json()


def lock_body(*, group: str = "c_ok", topic: str = "T_ok", broker: str = "broker-a") -> bytes:
    return LockBatchRequestBody(group, "cid", [MessageQueue(topic, broker, 0)]).to_json()


def check_body(*, group: str = "c_ok", topic: str = "T_ok") -> bytes:
    return CheckClientRequestBody("cid", group, SubscriptionData(topic, "a > 1", expression_type="SQL92")).to_json()


def broker_requests(name: str, phys: int) -> list[tuple[str, int, dict[str, object], bytes]]:
    """(label, code, extFields, body) of every broker request carrying ``name`` in one name field."""
    send = send_header("T_ok", 0).to_ext_fields()
    send_v2 = send_header("T_ok", 0).to_v2().to_ext_fields()
    pull = pull_header("c_ok", "T_ok", 0, 0).to_ext_fields()
    offset = {"consumerGroup": "c_ok", "topic": "T_ok", "queueId": 0}
    lookups = [(f"{code.name}.topic", code, {"topic": name, "queueId": 0, "timestamp": 0}, b"")
               for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME)]
    return [
        ("SEND_MESSAGE.topic", RequestCode.SEND_MESSAGE, {**send, "topic": name}, b"x"),
        ("SEND_MESSAGE_V2.topic", RequestCode.SEND_MESSAGE_V2, {**send_v2, "b": name}, b"x"),
        ("SEND_BATCH_MESSAGE.topic", RequestCode.SEND_BATCH_MESSAGE, {**send_v2, "b": name}, b""),
        ("SEND_MESSAGE.producerGroup", RequestCode.SEND_MESSAGE, {**send, "producerGroup": name}, b"x"),
        ("SEND_MESSAGE_V2.producerGroup", RequestCode.SEND_MESSAGE_V2, {**send_v2, "a": name}, b"x"),
        ("PULL_MESSAGE.topic", RequestCode.PULL_MESSAGE, {**pull, "topic": name}, b""),
        ("PULL_MESSAGE.consumerGroup", RequestCode.PULL_MESSAGE, {**pull, "consumerGroup": name}, b""),
        ("QUERY_MESSAGE.topic", RequestCode.QUERY_MESSAGE,
         {"topic": name, "key": "k", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 2**62}, b""),
        ("QUERY_CONSUMER_OFFSET.topic", RequestCode.QUERY_CONSUMER_OFFSET, {**offset, "topic": name}, b""),
        ("QUERY_CONSUMER_OFFSET.group", RequestCode.QUERY_CONSUMER_OFFSET, {**offset, "consumerGroup": name}, b""),
        ("UPDATE_CONSUMER_OFFSET.topic", RequestCode.UPDATE_CONSUMER_OFFSET,
         {**offset, "topic": name, "commitOffset": 1}, b""),
        ("UPDATE_CONSUMER_OFFSET.group", RequestCode.UPDATE_CONSUMER_OFFSET,
         {**offset, "consumerGroup": name, "commitOffset": 1}, b""),
        ("UPDATE_AND_CREATE_TOPIC.topic", RequestCode.UPDATE_AND_CREATE_TOPIC,
         {"topic": name, "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}, b""),
        *lookups,
        ("HEART_BEAT.producer", RequestCode.HEART_BEAT, {}, heartbeat_body("cid", producer=name)),
        ("HEART_BEAT.consumer", RequestCode.HEART_BEAT, {}, heartbeat_body("cid", consumer=name)),
        ("HEART_BEAT.subscription", RequestCode.HEART_BEAT, {}, heartbeat_body("cid", topic=name)),
        ("CONSUMER_SEND_MSG_BACK.group", RequestCode.CONSUMER_SEND_MSG_BACK,
         {"offset": phys, "group": name, "delayLevel": 3}, b""),
        ("CONSUMER_SEND_MSG_BACK.group-dlq", RequestCode.CONSUMER_SEND_MSG_BACK,
         {"offset": phys, "group": name, "delayLevel": -1}, b""),
        ("GET_CONSUMER_LIST_BY_GROUP.group", RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": name}, b""),
        ("UNREGISTER_CLIENT.producerGroup", RequestCode.UNREGISTER_CLIENT, {"clientID": "cid", "producerGroup": name},
         b""),
        ("UNREGISTER_CLIENT.consumerGroup", RequestCode.UNREGISTER_CLIENT, {"clientID": "cid", "consumerGroup": name},
         b""),
        ("LOCK_BATCH_MQ.group", RequestCode.LOCK_BATCH_MQ, {}, lock_body(group=name)),
        ("LOCK_BATCH_MQ.topic", RequestCode.LOCK_BATCH_MQ, {}, lock_body(topic=name)),
        ("LOCK_BATCH_MQ.brokerName", RequestCode.LOCK_BATCH_MQ, {}, lock_body(broker=name)),
        ("UNLOCK_BATCH_MQ.group", RequestCode.UNLOCK_BATCH_MQ, {}, lock_body(group=name)),
        ("UNLOCK_BATCH_MQ.topic", RequestCode.UNLOCK_BATCH_MQ, {}, lock_body(topic=name)),
        ("CHECK_CLIENT_CONFIG.group", RequestCode.CHECK_CLIENT_CONFIG, {}, check_body(group=name)),
        ("CHECK_CLIENT_CONFIG.topic", RequestCode.CHECK_CLIENT_CONFIG, {}, check_body(topic=name)),
        ("GET_TOPIC_STATS_INFO.topic", RequestCode.GET_TOPIC_STATS_INFO, {"topic": name}, b""),
        ("GET_CONSUME_STATS.group", RequestCode.GET_CONSUME_STATS, {"consumerGroup": name}, b""),
        ("GET_CONSUME_STATS.topic", RequestCode.GET_CONSUME_STATS, {"consumerGroup": "c_ok", "topic": name}, b""),
        ("UPDATE_TIERED_OFFSET.topic", RequestCode.UPDATE_TIERED_OFFSET, {"topic": name, "queueId": 0, "offset": 0},
         b""),
        ("QUERY_TIERED_OFFSET.topic", RequestCode.QUERY_TIERED_OFFSET, {"topic": name, "queueId": 0}, b""),
        # last: on a broker without the rule it deletes what the requests above let in
        ("DELETE_TOPIC_IN_BROKER.topic", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}, b""),
    ]


def register_body(topic: str) -> bytes:
    wrapper = TopicConfigSerializeWrapper({topic: TopicConfig(topic, 1, 1)}, DataVersion(1, 1))
    return RegisterBrokerBody(wrapper).to_json()


def namesrv_requests(name: str) -> list[tuple[str, int, dict[str, object], bytes]]:
    """(label, code, extFields, body) of every NameServer request carrying ``name`` in one name field."""
    reg = {"brokerName": "b_ok", "brokerAddr": "127.0.0.1:1", "clusterName": "C_ok", "haServerAddr": "",
           "brokerId": 0}
    kv = {"namespace": "NS_ok", "key": "k_ok", "value": "v"}
    return [
        ("PUT_KV_CONFIG.namespace", RequestCode.PUT_KV_CONFIG, {**kv, "namespace": name}, b""),
        ("PUT_KV_CONFIG.key", RequestCode.PUT_KV_CONFIG, {**kv, "key": name}, b""),
        ("GET_KV_CONFIG.namespace", RequestCode.GET_KV_CONFIG, {**kv, "namespace": name}, b""),
        ("GET_KV_CONFIG.key", RequestCode.GET_KV_CONFIG, {**kv, "key": name}, b""),
        ("DELETE_KV_CONFIG.key", RequestCode.DELETE_KV_CONFIG, {**kv, "key": name}, b""),
        ("GET_KVLIST_BY_NAMESPACE.namespace", RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": name}, b""),
        ("REGISTER_BROKER.brokerName", RequestCode.REGISTER_BROKER, {**reg, "brokerName": name}, b""),
        ("REGISTER_BROKER.clusterName", RequestCode.REGISTER_BROKER, {**reg, "clusterName": name}, b""),
        ("REGISTER_BROKER.topic", RequestCode.REGISTER_BROKER, reg, register_body(name)),
        ("UNREGISTER_BROKER.brokerName", RequestCode.UNREGISTER_BROKER, {**reg, "brokerName": name}, b""),
        ("QUERY_DATA_VERSION.brokerName", RequestCode.QUERY_DATA_VERSION, {**reg, "brokerName": name}, b""),
        ("GET_ROUTEINFO_BY_TOPIC.topic", RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name}, b""),
        ("WIPE_WRITE_PERM_OF_BROKER.brokerName", RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": name}, b""),
        ("GET_TOPICS_BY_CLUSTER.cluster", RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": name}, b""),
        ("DELETE_TOPIC_IN_NAMESRV.topic", RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name}, b""),
    ]


@pytest.fixture
def target(tmp_path, namesrv):
    """A broker of this test alone (store ``<root>/store``) and a sentinel directory beside its store."""
    b = Broker(namesrv, tmp_path / "b", verbose=False)
    sentinel = make_sentinel(b.root)
    yield b, sentinel
    b.stop_if_running()


def send_ok(raw: SyncRemotingClient, addr: str, topic: str) -> int:
    """Send one message to ``topic`` (auto-created); its commitlog offset."""
    resp = invoke(raw, addr, RequestCode.SEND_MESSAGE, send_header(topic, 0).to_ext_fields(), b"ok")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return parse_offset_msg_id(resp.ext_fields["msgId"])[1]


def test_retry_topic_of_a_traversal_group_cannot_delete_a_directory_outside_the_store(target):
    """The attack of the issue: HEART_BEAT with group ``g/../../../sentinel`` (the broker adds the
    retry topic ``%RETRY%g/../../../sentinel``), one SEND to ``%RETRY%g`` (so ``consumequeue/%RETRY%g``
    exists), then DELETE_TOPIC_IN_BROKER of the retry topic: ``rmtree(consumequeue/%RETRY%g/../../../
    sentinel)`` is the sentinel beside the store root."""
    b, sentinel = target
    group = f"g/../../../{SENTINEL}"
    retry = f"%RETRY%{group}"
    with SyncRemotingClient() as raw:
        hb = invoke(raw, b.addr, RequestCode.HEART_BEAT, {}, heartbeat_body(unique("cid"), consumer=group))
        send_ok(raw, b.addr, "%RETRY%g")
        gone = invoke(raw, b.addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": retry})
        topics = json.loads(invoke(raw, b.addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert sentinel.is_dir(), "the directory beside the store root was deleted"
    assert (sentinel / "precious.txt").read_text() == "must survive\n"
    assert (sentinel / "sub" / "deeper.bin").exists()
    assert hb.code == ResponseCode.SYSTEM_ERROR and RULE in hb.remark and "groupName" in hb.remark
    assert gone.code == ResponseCode.SYSTEM_ERROR and RULE in gone.remark
    assert retry not in topics
    assert b.server.alive()


def test_hostile_names_on_every_request_code_change_nothing_outside_the_store(target, namesrv):
    b, sentinel = target
    names = hostile_names(sentinel)
    with SyncRemotingClient() as raw:
        # the directories a traversal name climbs out of: consumequeue/%RETRY%g and %DLQ%g exist
        phys = send_ok(raw, b.addr, "%RETRY%g")
        send_ok(raw, b.addr, "%DLQ%g")
        before = tree(b.root.parent, b.store, b.log_path)
        accepted = []
        for name in names:
            requests = [(b.addr, r) for r in broker_requests(name, phys)]
            requests += [(namesrv, r) for r in namesrv_requests(name)]
            for addr, (label, code, fields, body) in requests:
                resp = invoke(raw, addr, code, fields, body)
                if must_refuse(label, name) and not refused(resp):
                    accepted.append((label, name, resp.code, resp.remark))
        after = tree(b.root.parent, b.store, b.log_path)

        assert after == before, "something outside the store root was created, changed or deleted"
        assert not accepted, f"{len(accepted)} requests with a hostile name not refused by the rule: {accepted[:8]}"
        assert (b.store / "config" / "topics.json").exists()
        topics = json.loads(invoke(raw, b.addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        assert not set(topics) & {n for name in names for n in (name, f"%RETRY%{name}", f"%DLQ%{name}")}
        # still serving: a normal send and pull, a normal heartbeat
        topic = unique("After")
        send_ok(raw, b.addr, topic)
        pulled = invoke(raw, b.addr, RequestCode.PULL_MESSAGE, pull_header("c_ok", topic, 0, 0).to_ext_fields())
        assert pulled.code == ResponseCode.SUCCESS and pulled.body
        hb = invoke(raw, b.addr, RequestCode.HEART_BEAT, {}, heartbeat_body(unique("cid"), consumer=unique("c")))
        assert hb.code == ResponseCode.SUCCESS
    assert b.server.alive()
    assert "Traceback" not in b.log()


def test_heartbeat_client_ids_are_checked_by_their_own_rule(target):
    """A clientID is RocketMQ's ``ip@instanceName`` (``@``, ``.``, ``#`` and ``:`` are ordinary in
    it), so it is no name under the topic rule; but it keys the client registry and queue locks:
    no path separator, no control character, not empty, at most 255 characters."""
    b, _ = target
    group = unique("c")
    good = ["10.0.0.1@12345#1234567890123", "127.0.0.1@DEFAULT", "192.168.1.7@instance:7-x", "主机@1"]
    bad = ["", "a/b", "../../x", "a\\b", "a\nb", "a\x00b", "tab\there", "x" * 256]
    answers, seen = {}, set()
    with SyncRemotingClient() as raw:
        for cid in good + bad:  # one connection is one client: each heartbeat replaces the one before
            answers[cid] = invoke(raw, b.addr, RequestCode.HEART_BEAT, {}, heartbeat_body(cid, consumer=group))
            seen |= set(json.loads(invoke(raw, b.addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                          {"consumerGroup": group}).body)["consumerIdList"])
    assert {cid for cid in good if answers[cid].code != ResponseCode.SUCCESS} == set()
    wrong = {cid: answers[cid].code for cid in bad
             if answers[cid].code != ResponseCode.SYSTEM_ERROR or "clientID" not in answers[cid].remark}
    assert wrong == {}, "hostile client ids must be refused, naming the field"
    assert seen == set(good), "only the well-formed client ids become group members"
    assert b.server.alive() and "Traceback" not in b.log()
