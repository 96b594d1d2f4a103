"""Support of the producer and push consumer tests: topics created on several brokers (``servers.Broker``),
and reading queues back."""

from __future__ import annotations

from servers import Broker, wait_until

from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag


def create_topic(api: SyncMQClientAPI, namesrv: str, brokers: list[Broker], topic: str, queues: int = 4) -> None:
    """UPDATE_AND_CREATE_TOPIC on every broker, then wait until the NameServer routes it to all of them."""
    for b in brokers:
        api.create_topic(b.addr, topic, queues, queues)

    def routed() -> bool:
        route = api.get_route_info(namesrv, topic)
        return route is not None and {q.broker_name for q in route.queue_datas} == {b.name for b in brokers}

    wait_until(routed, what=f"route of {topic}")


def pull_header(topic: str, queue_id: int, offset: int, max_nums: int = 64) -> PullMessageRequestHeader:
    """A plain PULL_MESSAGE header (subscription ``*``, no long polling, no offset commit)."""
    return PullMessageRequestHeader(
        consumer_group="producer_test_reader", topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=max_nums, sys_flag=build_pull_sys_flag(subscription=True), commit_offset=0,
        suspend_timeout_millis=0, sub_version=0, subscription="*")


def pull_all(api: SyncMQClientAPI, addr: str, topic: str, queue_id: int) -> list[StoredMessage]:
    """Every message of one queue, from offset 0 to its end."""
    out: list[StoredMessage] = []
    offset = 0
    while True:
        result = api.pull_message(addr, pull_header(topic, queue_id, offset))
        if result.status != PullStatus.FOUND:
            return out
        out.extend(result.messages())
        offset = result.next_begin_offset
