"""NameServer request handlers: RocketMQ's DefaultRequestProcessor, code for code.

Served: REGISTER_BROKER (103), UNREGISTER_BROKER (104), GET_ROUTEINFO_BY_TOPIC (105),
GET_BROKER_CLUSTER_INFO (106), PUT/GET/DELETE_KV_CONFIG (100-102), GET_KVLIST_BY_NAMESPACE
(219), GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224),
DELETE_TOPIC_IN_NAMESRV (216), WIPE_WRITE_PERM_OF_BROKER (205), QUERY_DATA_VERSION (322).
Anything else is answered REQUEST_CODE_NOT_SUPPORTED by the remoting server. A request missing
a required header field is answered SYSTEM_ERROR naming the field, as RocketMQ does.

REGISTER_BROKER header (RegisterBrokerRequestHeader, all strings on the wire): brokerName,
brokerAddr, clusterName, haServerAddr, brokerId (required), compressed ("true" → the body is
RocketMQ 4.x's deflated layout), bodyCrc32 (non-zero → CRC32 & 0x7FFFFFFF of the body, checked).
Body: RegisterBrokerBody JSON ``{"filterServerList":[],"topicConfigSerializeWrapper":
{"dataVersion":{"counter":N,"timestamp":MS},"topicConfigTable":{name:{topicName,
readQueueNums,writeQueueNums,perm,topicSysFlag,...}}}}``. Response: extFields haServerAddr and
masterAddr (slaves only), body the ORDER_TOPIC_CONFIG KVTable when there is one.

What the real C++ client (PyPI ``rocketmq`` 0.4.4, bundling rocketmq-client-cpp 1.2.x) does
against us, observed in tests/peers/test_namesrv_cpp_client.py and with a recording broker:

* ``Producer.start()`` sends nothing to the NameServer. The first ``send_sync`` to topic T
  sends GET_ROUTEINFO_BY_TOPIC (105), extFields ``{"topic": T, "AccessKey": "", "OnsChannel":
  "ALIYUN", "Signature": <base64 HMAC>}``, ``"language":"CPP"``, ``"version":63`` (V3_1_8,
  below V4_9_4, so a RocketMQ 4.9.4+ NameServer would answer it in fastjson's unquoted form).
* TOPIC_NOT_EXIST makes it ask for the default topic ``TBW102`` (auto-create), then retry the
  pair a few times, then fail with "No route info of this topic: T". Our TOPIC_NOT_EXIST
  remark is RocketMQ's, word for word.
* It parses our standard-JSON route (``"brokerAddrs":{"0":"host:port"}``) and fastjson's
  unquoted ``{0:"host:port"}`` alike (jsoncpp ``allowNumericKeys``; ids read back with
  ``atoi``), then dials the master (id 0) address. It reads only queueDatas (brokerName,
  readQueueNums, writeQueueNums, perm), brokerDatas (brokerName, brokerAddrs) and
  orderTopicConf; ``cluster``, ``topicSysFlag`` and ``filterServerTable`` are ignored. We
  write standard JSON always (see ``wire.py``).
* To the broker it then sends SEND_MESSAGE (10, not SEND_MESSAGE_V2) with extFields
  producerGroup, topic, defaultTopic ("TBW102"), defaultTopicQueueNums ("4"), queueId, sysFlag,
  bornTimestamp, flag, properties (``KEYS\x01k\x02TAGS\x01t\x02UNIQ_KEY\x01<32 hex>\x02
  WAIT\x01true\x02``), reconsumeTimes, unitMode ("0"), batch ("0") — plus the three ACL
  fields — and the raw body; after a failed send it retries twice on other queues. On
  shutdown it sends UNREGISTER_CLIENT (35) with clientID, producerGroup, consumerGroup ("").
"""

from __future__ import annotations

import zlib

from spark_mq.common.config import NamesrvConfig
from spark_mq.common.errors import RemotingCommandError
from spark_mq.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from spark_mq.namesrv.route_info import RouteInfoManager, TopicRoute
from spark_mq.namesrv.wire import (
    DataVersion,
    RegisterBrokerBody,
    broker_data_json,
    decode_json,
    decode_register_broker_body,
    dumps,
    queue_data_json,
    topic_list_json,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.server import RemotingServer

# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL) in RocketMQ 4.x
_APPLY_TOPIC_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def topic_not_exist_remark(topic: str) -> str:
    """RocketMQ's remark for TOPIC_NOT_EXIST, word for word."""
    return f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC_HINT}"


def _field(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise RemotingCommandError(f"the custom field <{name}> is null")
    return value


def _int(cmd: RemotingCommand, name: str) -> int:
    value = _field(cmd, name)
    try:
        return int(value)
    except ValueError:
        raise RemotingCommandError(f"the custom field <{name}> is {value!r}, not an integer") from None


def encode_topic_route(route: TopicRoute) -> bytes:
    """TopicRouteData JSON in fastjson's field order (standard JSON: broker ids quoted)."""
    doc: dict[str, object] = {
        "brokerDatas": [broker_data_json(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas],
        "filterServerTable": {},
    }
    if route.order_topic_conf is not None:
        doc["orderTopicConf"] = route.order_topic_conf
    doc["queueDatas"] = [queue_data_json(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm,
                                         q.topic_sys_flag) for q in route.queue_datas]
    return dumps(doc)


class NamesrvProcessor:
    """The handlers; all run on the NameServer's event loop, one request at a time per await."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, config: NamesrvConfig) -> None:
        self.routes = routes
        self.kv = kv
        self.config = config

    def register_on(self, server: RemotingServer) -> None:
        table = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
        }
        for code, handler in table.items():
            server.register(code, handler)

    # -- KV config ----------------------------------------------------------------------------

    async def put_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.kv.put(_field(cmd, "namespace"), _field(cmd, "key"), _field(cmd, "value"))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def get_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ns, key = _field(cmd, "namespace"), _field(cmd, "key")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    async def delete_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.kv.delete(_field(cmd, "namespace"), _field(cmd, "key"))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def get_kv_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ns = _field(cmd, "namespace")
        table = self.kv.namespace(ns)
        if table is None:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps({"table": table}))

    # -- brokers ------------------------------------------------------------------------------

    async def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name, addr, cluster = _field(cmd, "brokerName"), _field(cmd, "brokerAddr"), _field(cmd, "clusterName")
        ha_addr, broker_id = _field(cmd, "haServerAddr"), _int(cmd, "brokerId")
        crc = int(cmd.ext_fields.get("bodyCrc32") or 0)
        if crc and crc != zlib.crc32(cmd.body) & 0x7FFFFFFF:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if cmd.body:
            compressed = cmd.ext_fields.get("compressed", "false").lower() == "true"
            body = decode_register_broker_body(cmd.body, compressed)
        else:
            body = RegisterBrokerBody(DataVersion(0, 0), {}, [])
        result = self.routes.register_broker(cluster, addr, name, broker_id, ha_addr, body.data_version,
                                             body.topic_configs, conn)
        order_conf = self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return cmd.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"haServerAddr": result.ha_server_addr or None, "masterAddr": result.master_addr or None},
            body=dumps({"table": order_conf}) if order_conf is not None else b"")

    async def unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.routes.unregister_broker(_field(cmd, "clusterName"), _field(cmd, "brokerAddr"),
                                      _field(cmd, "brokerName"), _int(cmd, "brokerId"))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        addr = _field(cmd, "brokerAddr")
        theirs = DataVersion.from_json(decode_json(cmd.body, "DataVersion") if cmd.body else None)
        changed = self.routes.topic_config_changed(addr, theirs)
        if not changed:
            self.routes.touch(addr)
        ours = self.routes.data_version_of(addr)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"changed": changed},
                                 body=dumps(ours.to_json()) if ours is not None else b"")

    async def wipe_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        count = self.routes.wipe_write_perm(_field(cmd, "brokerName"))
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": count})

    # -- routes and topics --------------------------------------------------------------------

    async def get_route_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = _field(cmd, "topic")
        route = self.routes.pickup_topic_route(topic)
        if route is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, topic_not_exist_remark(topic))
        if self.config.order_message_enable:
            conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            route = TopicRoute(route.queue_datas, route.broker_datas, conf)
        return cmd.make_response(ResponseCode.SUCCESS, body=encode_topic_route(route))

    async def get_cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        doc = {
            "brokerAddrTable": {name: broker_data_json(b.cluster, b.broker_name, b.broker_addrs)
                                for name, b in sorted(self.routes.broker_table.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.routes.cluster_table.items())},
        }
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps(doc))

    async def get_all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=topic_list_json(self.routes.all_topics()))

    async def get_topics_by_cluster(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topics = self.routes.topics_of_cluster(_field(cmd, "cluster"))
        return cmd.make_response(ResponseCode.SUCCESS, body=topic_list_json(topics))

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.routes.delete_topic(_field(cmd, "topic"))
        return cmd.make_response(ResponseCode.SUCCESS)
