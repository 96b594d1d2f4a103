"""An offset reset (INVOKE_BROKER_TO_RESET_OFFSET) on a broker with aclEnable=true needs an admin account: the
group's own subscriber is refused and the offsets stay; the admin's reset moves them."""

from __future__ import annotations

from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.perm import PERM_READ_WRITE
from spark_mq.remoting.bodies import ResetOffsetBody
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import CreateTopicRequestHeader, ResetOffsetRequestHeader

from ._support import ADMIN, GROUP, SUBSCRIBER, TOPIC, request

RESET = ResetOffsetRequestHeader(topic=TOPIC, group=GROUP, timestamp=0, is_force=True).to_ext_fields()


def committed(client: SyncRemotingClient, addr: str, queue_id: int) -> str:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
    answer = client.invoke(addr, request(RequestCode.QUERY_CONSUMER_OFFSET, fields, credentials=SUBSCRIBER))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer.ext_fields["offset"]


def test_only_an_admin_resets_a_groups_offsets(acl_broker):
    addr = acl_broker.addr
    with SyncRemotingClient() as client:
        create = CreateTopicRequestHeader(topic=TOPIC, default_topic=AUTO_CREATE_TOPIC, read_queue_nums=2,
                                          write_queue_nums=2, perm=PERM_READ_WRITE).to_ext_fields()
        answer = client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, create, credentials=ADMIN))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        for q in range(2):
            fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": 7}
            answer = client.invoke(addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, fields, credentials=SUBSCRIBER))
            assert answer.code == ResponseCode.SUCCESS, answer.remark

        refused = client.invoke(addr, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RESET, credentials=SUBSCRIBER))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert [committed(client, addr, q) for q in range(2)] == ["7", "7"]

        answer = client.invoke(addr, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RESET, credentials=ADMIN))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        offsets = ResetOffsetBody.from_json(answer.body).offset_table
        assert sorted((mq.topic, mq.queue_id, o) for mq, o in offsets.items()) == [(TOPIC, 0, 0), (TOPIC, 1, 0)]
        assert [committed(client, addr, q) for q in range(2)] == ["0", "0"]
