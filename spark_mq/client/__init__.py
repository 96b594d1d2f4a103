"""The client side of the RocketMQ protocol: typed requests to NameServers and brokers
(``MQClientAPI``, blocking ``SyncMQClientAPI``), client ids and message UNIQ_KEYs; the
producer, consumers and admin build on these."""

from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullResult, PullStatus, SendResult, SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI

__all__ = ["MQClientAPI", "PullResult", "PullStatus", "SendResult", "SendStatus", "SyncMQClientAPI"]
