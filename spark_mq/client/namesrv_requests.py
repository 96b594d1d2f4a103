"""``NamesrvRequests``: the requests :class:`~spark_mq.client.api.MQClientAPI` sends to a NameServer —
routes, clusters and topic lists, broker registration, KV config (RocketMQ's ``MQClientAPIImpl``
methods of the same names).

Thread-safety: coroutines of one event loop, as the API's.
"""

from __future__ import annotations

import dataclasses

from spark_mq.client.requester import Requester
from spark_mq.client.results import RegisterBrokerResult
from spark_mq.remoting.bodies import ClusterInfo, KVTable, RegisterBrokerBody, TopicList, TopicRouteData, body_crc32
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)


class NamesrvRequests(Requester):
    """Typed requests to NameServers (``namesrv`` is a NameServer's ``host:port``)."""

    async def get_route_info(self, namesrv: str, topic: str, *, timeout: float | None = None) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the NameServer knows no such topic."""
        response = await self._invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                      GetRouteInfoRequestHeader(topic=topic), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        return TopicRouteData.from_json(response.body)

    async def get_cluster_info(self, namesrv: str, *, timeout: float | None = None) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        response = await self._invoke(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=timeout)
        return ClusterInfo.from_json(response.body)

    async def get_all_topic_list(self, namesrv: str, *, timeout: float | None = None) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        response = await self._invoke(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout=timeout)
        return TopicList.from_json(response.body)

    async def get_topics_by_cluster(self, namesrv: str, cluster: str, *, timeout: float | None = None) -> TopicList:
        """GET_TOPICS_BY_CLUSTER."""
        response = await self._invoke(namesrv, RequestCode.GET_TOPICS_BY_CLUSTER,
                                      GetTopicsByClusterRequestHeader(cluster=cluster), timeout=timeout)
        return TopicList.from_json(response.body)

    async def register_broker(self, namesrv: str, header: RegisterBrokerRequestHeader, body: RegisterBrokerBody,
                              *, compressed: bool = False, timeout: float | None = None) -> RegisterBrokerResult:
        """REGISTER_BROKER; ``compressed`` and ``bodyCrc32`` in the header are set from the body sent."""
        raw = body.encode_compressed() if compressed else body.to_json()
        header = dataclasses.replace(header, compressed=compressed, body_crc32=body_crc32(raw))
        response = await self._invoke(namesrv, RequestCode.REGISTER_BROKER, header, raw, timeout)
        out = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
        table = KVTable.from_json(response.body).table if response.body else {}
        return RegisterBrokerResult(out.ha_server_addr, out.master_addr, table)

    async def unregister_broker(self, namesrv: str, cluster_name: str, broker_addr: str, broker_name: str,
                                broker_id: int, *, timeout: float | None = None) -> None:
        """UNREGISTER_BROKER."""
        header = UnRegisterBrokerRequestHeader(broker_name=broker_name, broker_addr=broker_addr,
                                               cluster_name=cluster_name, broker_id=broker_id)
        await self._invoke(namesrv, RequestCode.UNREGISTER_BROKER, header, timeout=timeout)

    async def put_kv_config(self, namesrv: str, namespace: str, key: str, value: str, *,
                            timeout: float | None = None) -> None:
        """PUT_KV_CONFIG."""
        header = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        await self._invoke(namesrv, RequestCode.PUT_KV_CONFIG, header, timeout=timeout)

    async def get_kv_config(self, namesrv: str, namespace: str, key: str, *,
                            timeout: float | None = None) -> str | None:
        """GET_KV_CONFIG; None when the key is not set."""
        response = await self._invoke(namesrv, RequestCode.GET_KV_CONFIG,
                                      GetKVConfigRequestHeader(namespace=namespace, key=key), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return GetKVConfigResponseHeader.from_ext_fields(response.ext_fields).value

    async def get_kv_list_by_namespace(self, namesrv: str, namespace: str, *,
                                       timeout: float | None = None) -> dict[str, str] | None:
        """GET_KVLIST_BY_NAMESPACE; None when the namespace was never written."""
        response = await self._invoke(namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE,
                                      GetKVListByNamespaceRequestHeader(namespace=namespace), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return KVTable.from_json(response.body).table

    async def delete_kv_config(self, namesrv: str, namespace: str, key: str, *,
                               timeout: float | None = None) -> None:
        """DELETE_KV_CONFIG."""
        header = DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        await self._invoke(namesrv, RequestCode.DELETE_KV_CONFIG, header, timeout=timeout)

    async def delete_topic_in_namesrv(self, namesrv: str, topic: str, cluster_name: str | None = None, *,
                                      timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV."""
        header = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster_name)
        await self._invoke(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, header, timeout=timeout)
