"""NameServer request handlers: RocketMQ's DefaultRequestProcessor, code for code.

Served: REGISTER_BROKER (103), UNREGISTER_BROKER (104), GET_ROUTEINFO_BY_TOPIC (105),
GET_BROKER_CLUSTER_INFO (106), PUT/GET/DELETE_KV_CONFIG (100-102), GET_KVLIST_BY_NAMESPACE
(219), GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224),
DELETE_TOPIC_IN_NAMESRV (216), WIPE_WRITE_PERM_OF_BROKER (205), QUERY_DATA_VERSION (322).
Anything else is answered REQUEST_CODE_NOT_SUPPORTED by the remoting server. A request missing
a required header field, or with one that does not parse, is answered SYSTEM_ERROR naming the
field, as RocketMQ does (the header classes of ``remoting/headers.py`` raise ``HeaderError``).

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
  orderTopicConf; ``cluster``, ``topicSysFlag`` and ``filterServerTable`` are ignored.
* To the broker it then sends SEND_MESSAGE (10, not SEND_MESSAGE_V2) with extFields
  producerGroup, topic, defaultTopic ("TBW102"), defaultTopicQueueNums ("4"), queueId, sysFlag,
  bornTimestamp, flag, properties (``KEYS\x01k\x02TAGS\x01t\x02UNIQ_KEY\x01<32 hex>\x02
  WAIT\x01true\x02``), reconsumeTimes, unitMode ("0"), batch ("0") — plus the three ACL
  fields — and the raw body; after a failed send it retries twice on other queues. On
  shutdown it sends UNREGISTER_CLIENT (35) with clientID, producerGroup, consumerGroup ("").

What we write: route and cluster info always in standard JSON (broker ids quoted), as a 4.9.4+
NameServer does for clients asking ``acceptStandardJsonOnly``: fastjson, Go's encoding/json
and the C++ client (jsoncpp with ``allowNumericKeys``, keys read back with ``atoi``) all accept
it — checked against the real C++ client in tests/peers. Queue data carries the topic sys flag
as both ``topicSynFlag`` (Java clients before 4.9) and ``topicSysFlag`` (4.9 and later).
"""

from __future__ import annotations

import dataclasses

from spark_mq.common.config import NamesrvConfig
from spark_mq.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from spark_mq.namesrv.route_info import RouteInfoManager
from spark_mq.remoting.bodies import DataVersion, KVTable, RegisterBrokerBody, TopicList, body_crc32
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from spark_mq.remoting.server import RemotingServer

# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL) in RocketMQ 4.x
_APPLY_TOPIC_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def topic_not_exist_remark(topic: str) -> str:
    """RocketMQ's remark for TOPIC_NOT_EXIST, word for word."""
    return f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC_HINT}"


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
        h = PutKVConfigRequestHeader.from_ext_fields(cmd.ext_fields)
        self.kv.put(h.namespace, h.key, h.value)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def get_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_ext_fields(cmd.ext_fields)
        value = self.kv.get(h.namespace, h.key)
        if value is None:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     f"No config item, Namespace: {h.namespace} Key: {h.key}")
        response = GetKVConfigResponseHeader(value=value)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=response.to_ext_fields())

    async def delete_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_ext_fields(cmd.ext_fields)
        self.kv.delete(h.namespace, h.key)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def get_kv_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ns = GetKVListByNamespaceRequestHeader.from_ext_fields(cmd.ext_fields).namespace
        table = self.kv.namespace(ns)
        if table is None:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.make_response(ResponseCode.SUCCESS, body=KVTable(table).to_json())

    # -- brokers ------------------------------------------------------------------------------

    async def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.body_crc32 and h.body_crc32 != body_crc32(cmd.body):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if not cmd.body:
            body = RegisterBrokerBody()
        elif h.compressed:
            body = RegisterBrokerBody.decode_compressed(cmd.body)
        else:
            body = RegisterBrokerBody.from_json(cmd.body)
        wrapper = body.topic_config_serialize_wrapper
        result = self.routes.register_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id,
                                             h.ha_server_addr, wrapper.data_version, wrapper.topic_config_table, conn)
        order_conf = self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        response = RegisterBrokerResponseHeader(ha_server_addr=result.ha_server_addr or None,
                                                master_addr=result.master_addr or None)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=response.to_ext_fields(),
                                 body=KVTable(order_conf).to_json() if order_conf is not None else b"")

    async def unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        addr = QueryDataVersionRequestHeader.from_ext_fields(cmd.ext_fields).broker_addr
        theirs = DataVersion.from_json(cmd.body) if cmd.body else DataVersion()
        changed = self.routes.topic_config_changed(addr, theirs)
        if not changed:
            self.routes.touch(addr)
        ours = self.routes.data_version_of(addr)
        response = QueryDataVersionResponseHeader(changed=changed)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=response.to_ext_fields(),
                                 body=ours.to_json() if ours is not None else b"")

    async def wipe_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        response = WipeWritePermOfBrokerResponseHeader(wipe_topic_count=self.routes.wipe_write_perm(h.broker_name))
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=response.to_ext_fields())

    # -- routes and topics --------------------------------------------------------------------

    async def get_route_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields).topic
        route = self.routes.pickup_topic_route(topic)
        if route is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, topic_not_exist_remark(topic))
        if self.config.order_message_enable:
            route = dataclasses.replace(route, order_topic_conf=self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic))
        return cmd.make_response(ResponseCode.SUCCESS, body=route.to_json(standard=True, both_flag_names=True))

    async def get_cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=self.routes.cluster_info().to_json(standard=True))

    async def get_all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=TopicList(self.routes.all_topics()).to_json())

    async def get_topics_by_cluster(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        cluster = GetTopicsByClusterRequestHeader.from_ext_fields(cmd.ext_fields).cluster
        return cmd.make_response(ResponseCode.SUCCESS, body=TopicList(self.routes.topics_of_cluster(cluster)).to_json())

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.routes.delete_topic(DeleteTopicFromNamesrvRequestHeader.from_ext_fields(cmd.ext_fields).topic)
        return cmd.make_response(ResponseCode.SUCCESS)
