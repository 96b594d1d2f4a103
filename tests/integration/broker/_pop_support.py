"""Helpers of the pop tests: groups with a retry limit, numbered messages."""

from __future__ import annotations

from servers import Broker, unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.common.message import Message
from spark_mq.remoting.bodies import SubscriptionGroupConfig
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

# invisible times of 1 s (the broker's minimum) make redeliveries fast; queues switch modes after 1 s
POP_CONF = "popModeSwitchMillis=1000\n"


def create_group(broker: Broker, group: str, retry_max_times: int) -> None:
    body = SubscriptionGroupConfig(group, retry_max_times=retry_max_times).to_json()
    with SyncRemotingClient() as client:
        resp = client.invoke(broker.addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                                  body=body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def send_numbered(namesrv: str, topic: str, count: int, *, start: int = 0, tags: str | None = None,
                  keyed: bool = False) -> dict[int, int]:
    """Messages ``start..start+count-1`` (bodies are the numbers); ``keyed``: message i to the queue of key
    ``i % 4`` (send_orderly). Returns each number's queue id."""
    queues = {}
    with SyncProducer(unique("pop_producer"), ClientConfig(namesrv)) as producer:
        producer.start()
        for i in range(start, start + count):
            msg = Message(topic, str(i).encode(), tags=tags)
            result = producer.send_orderly(msg, i % 4) if keyed else producer.send(msg)
            queues[i] = result.queue_id
    return queues
