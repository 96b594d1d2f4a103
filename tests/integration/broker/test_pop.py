"""Pop consumption against a real broker: receive, ack, change of invisible duration, peek, redelivery after
the invisible time, disjoint deliveries to concurrent consumers of one queue, orderly pop, retry then DLQ,
and the pop/pull mixing rule."""

from __future__ import annotations

import threading
import time

import pytest
from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import decode_units_list
from spark_mq.client.simple_consumer import SyncSimpleConsumer
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message
from spark_mq.remoting.bodies import BatchAck, BatchAckMessageRequestBody
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import (
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
)

from ._pop_support import POP_CONF, create_group, send_numbered
from ._scheduled import metric
from ._support import create_routed_topic, pull_header


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return POP_CONF + "enablePropertyFilter=true\n"


def consumer(namesrv: str, group: str, topic: str, **kw) -> SyncSimpleConsumer:
    c = SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name=unique("i")), {topic: kw.pop("expr", "*")},
                           **kw)
    c.start()
    return c


def drain(c: SyncSimpleConsumer, invisible_s: float = 30.0, wait_s: float = 0.5) -> list:
    out = []
    while batch := c.receive(32, invisible_s, wait_s):
        out.extend(batch)
    return out


def numbers(messages) -> list[int]:
    return sorted(int(m.body) for m in messages)


def test_receive_ack_and_unacked_messages_come_back_after_their_invisible_time(broker, namesrv):
    topic, group = unique("PopT"), unique("pop_g")
    create_routed_topic(broker, topic, 4)
    send_numbered(namesrv, topic, 40)
    with consumer(namesrv, group, topic) as c:
        got = drain(c, invisible_s=2.0)
        assert numbers(got) == list(range(40))
        assert all(m.delivery_attempt == 1 and m.topic == topic for m in got)
        for m in got[:10]:
            c.ack(m)
        c.ack_many(got[10:30])  # one BATCH_ACK_MESSAGE: an entry per pop of a queue
        assert c.receive(32, 2.0, 0.0) == []  # the other 10 are invisible
        again = drain(c, invisible_s=30.0, wait_s=4.0)
        assert numbers(again) == numbers(got[30:])
        assert all(m.delivery_attempt == 2 and m.message.topic == topic for m in again)
        c.ack_many(again)  # read from the pop retry topic
        with pytest.raises(MQClientError) as e:  # acknowledged already
            c.ack(again[0])
        assert e.value.code == ResponseCode.NO_MESSAGE
        with pytest.raises(MQClientError) as e:
            c.ack_many(again[:3])
        assert e.value.code == ResponseCode.NO_MESSAGE
        assert c.receive(32, 1.0, 1.5) == []
    assert metric(broker, f'spark_mq_messages_out_total{{topic="{topic}"}}') == 50  # counted as pulls are


def test_change_invisible_duration_keeps_a_message_invisible_and_renews_its_receipt(broker, namesrv):
    topic, group = unique("PopCi"), unique("pop_ci")
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 2)
    with consumer(namesrv, group, topic) as c:
        first, second = drain(c, invisible_s=1.0)
        kept = c.change_invisible_duration(first, 10.0)
        assert kept.receipt != first.receipt and kept.invisible_until > first.invisible_until
        back = drain(c, invisible_s=30.0, wait_s=3.0)
        assert numbers(back) == [int(second.body)]  # the other stays invisible
        with pytest.raises(MQClientError):  # the old receipt is spent
            c.ack(first)
        c.ack_many([kept, back[0]])


def test_peek_hands_nothing_out_and_pop_filters_by_tag(broker, namesrv, api):
    topic, group = unique("PopPk"), unique("pop_pk")
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 5, tags="a")
    send_numbered(namesrv, topic, 5, start=5, tags="b")
    peek = raw(broker, RequestCode.PEEK_MESSAGE, PeekMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=0, max_msg_nums=32))
    assert peek.code == ResponseCode.SUCCESS
    assert sorted(int(m.body) for m in decode_units_list(peek.body)) == list(range(10))
    with consumer(namesrv, group, topic, expr="b") as c:
        got = drain(c)
        assert numbers(got) == list(range(5, 10))
        for m in got:
            c.ack(m)


def raw(broker, code: RequestCode, header) -> RemotingCommand:
    with SyncRemotingClient() as client:
        return client.invoke(broker.addr, RemotingCommand.request(code, header.to_ext_fields()))


def test_pop_filters_by_sql92_and_a_bad_expression_is_refused_with_its_position(broker, namesrv):
    topic, group = unique("PopSql"), unique("pop_sql")
    create_routed_topic(broker, topic, 2)
    with SyncProducer(unique("pop_producer"), ClientConfig(namesrv)) as producer:
        producer.start()
        for i in range(20):
            producer.send(Message(topic, str(i).encode(), properties={"num": str(i)}))
    with consumer(namesrv, group, topic, expr="num >= 5 AND num < 8", expression_type="SQL92") as c:
        got = drain(c)
        assert numbers(got) == [5, 6, 7]
        for m in got:
            c.ack(m)
    with consumer(namesrv, unique("pop_sql"), topic, expr="num >>= 5", expression_type="SQL92") as c:
        with pytest.raises(MQClientError) as e:
            c.receive(1, 30.0, 0.0)
        assert e.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column" in e.value.remark


def test_four_consumers_popping_one_queue_get_disjoint_messages(broker, namesrv):
    topic, group = unique("PopDj"), unique("pop_dj")
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 400)
    seen: list[list[int]] = [[] for _ in range(4)]

    def run(i: int) -> None:
        with consumer(namesrv, group, topic) as c:
            while batch := c.receive(4, 30.0, 1.0):
                seen[i].extend(int(m.body) for m in batch)
                for m in batch:
                    c.ack(m)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = [n for s in seen for n in s]
    assert sorted(everything) == list(range(400))  # every message once: disjoint and complete
    assert sum(1 for s in seen if s) >= 2  # the queue was shared


def test_orderly_pop_hands_a_queues_next_message_out_only_after_the_previous_is_acknowledged(broker, namesrv):
    topic, group = unique("PopOrd"), unique("pop_ord")
    create_routed_topic(broker, topic, 2)
    queue_of = send_numbered(namesrv, topic, 20, keyed=True)
    with consumer(namesrv, group, topic, order=True) as c:
        first = c.receive(1, 2.0, 1.0)
        assert len(first) == 1
        q = first[0].message.queue_id
        others = drain(c, invisible_s=30.0, wait_s=0.2)
        assert all(m.message.queue_id != q for m in others)  # the queue is held while its message is in flight
        for m in others:
            c.ack(m)
        # not acknowledged: the same message again after its invisible time, before anything after it
        again = drain(c, invisible_s=30.0, wait_s=4.0)
        assert again[0].message.queue_offset == first[0].message.queue_offset
        assert [int(m.body) for m in again] == sorted(n for n, qid in queue_of.items() if qid == q)
        for m in again:
            c.ack(m)
        assert drain(c, wait_s=0.2) == []


def test_a_message_never_acknowledged_goes_to_the_dlq_after_the_groups_max_reconsume_times(broker, namesrv, api):
    topic, group = unique("PopDlq"), unique("pop_dlq")
    create_routed_topic(broker, topic, 1)
    create_group(broker, group, retry_max_times=2)
    send_numbered(namesrv, topic, 1)
    dlq = f"%DLQ%{group}"
    with consumer(namesrv, group, topic) as c:
        attempts = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and api.get_max_offset(broker.addr, dlq, 0) != 1:
            attempts.extend(m.delivery_attempt for m in c.receive(1, 1.0, 0.5))
        assert attempts == [1, 2, 3]  # delivered, then redelivered twice (retryMaxTimes=2), then moved
        assert c.receive(1, 1.0, 1.5) == []  # and not again


def test_one_group_does_not_pop_and_pull_one_queue_at_once_but_can_switch(broker, namesrv, api):
    topic, group = unique("PopMix"), unique("pop_mix")
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 4)
    with consumer(namesrv, group, topic) as c:
        got = c.receive(2, 30.0, 0.5)
        with pytest.raises(MQClientError) as e:
            api.pull_message(broker.addr, pull_header(group, topic, 0, 0))
        assert "does not mix pop and pull" in e.value.remark and "popped messages are unacknowledged" in e.value.remark
        for m in got:
            c.ack(m)
        time.sleep(1.2)  # popModeSwitchMillis=1000 with nothing in flight: the group may pull now
        assert api.pull_message(broker.addr, pull_header(group, topic, 0, 0)).status.name == "FOUND"
        with pytest.raises(MQClientError) as e:  # and the queue is the pulls' for a while
            c.receive(2, 30.0, 0.0)
        assert "cannot pop queue 0" in e.value.remark


def test_raw_pop_answers_rocketmqs_headers(broker, namesrv, api):
    topic, group = unique("PopRaw"), unique("pop_raw")
    create_routed_topic(broker, topic, 2)
    send_numbered(namesrv, topic, 4)
    resp = raw(broker, RequestCode.POP_MESSAGE, PopMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=-1, max_msg_nums=32, invisible_time=60_000, poll_time=0,
        born_time=int(time.time() * 1000), init_mode=0))
    assert resp.code == ResponseCode.SUCCESS
    f = resp.ext_fields
    assert {"popTime", "invisibleTime", "reviveQid", "restNum", "startOffsetInfo", "msgOffsetInfo"} <= set(f)
    assert f["invisibleTime"] == "60000" and f["reviveQid"] == "0"
    assert all(entry.split(" ")[0] == "0" for entry in f["startOffsetInfo"].split(";"))


def test_batch_ack_notification_and_polling_info_over_raw_remoting(broker, namesrv):
    topic, group = unique("PopBa"), unique("pop_ba")
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 4)
    note = raw(broker, RequestCode.NOTIFICATION, NotificationRequestHeader(
        consumer_group=group, topic=topic, queue_id=-1, poll_time=0, born_time=int(time.time() * 1000)))
    assert (note.code, note.ext_fields["hasMsg"]) == (ResponseCode.SUCCESS, "true")
    popped = raw(broker, RequestCode.POP_MESSAGE, PopMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=0, max_msg_nums=32, invisible_time=1000, poll_time=0,
        born_time=int(time.time() * 1000), init_mode=0))
    assert popped.code == ResponseCode.SUCCESS
    offsets = tuple(m.queue_offset for m in decode_units_list(popped.body))
    assert offsets == (0, 1, 2, 3)
    f = popped.ext_fields
    ack = BatchAck(group, topic, False, int(f["startOffsetInfo"].split()[2]), 0, int(f["reviveQid"]),
                   int(f["popTime"]), int(f["invisibleTime"]), offsets)
    with SyncRemotingClient() as client:
        answer = client.invoke(broker.addr, RemotingCommand.request(
            RequestCode.BATCH_ACK_MESSAGE, body=BatchAckMessageRequestBody(broker.name, [ack]).to_json()))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    time.sleep(1.5)  # past the invisible time: nothing comes back, all were acknowledged
    again = raw(broker, RequestCode.POP_MESSAGE, PopMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=-1, max_msg_nums=32, invisible_time=1000, poll_time=0,
        born_time=int(time.time() * 1000), init_mode=0))
    assert again.code == ResponseCode.PULL_NOT_FOUND
    info = raw(broker, RequestCode.POLLING_INFO, PollingInfoRequestHeader(consumer_group=group, topic=topic,
                                                                          queue_id=0))
    assert (info.code, info.ext_fields["pollingNum"]) == (ResponseCode.SUCCESS, "0")


def test_a_timer_message_is_popped_once_due_not_before(broker, namesrv):
    topic, group = unique("PopTimer"), unique("pop_timer")
    create_routed_topic(broker, topic, 1)
    due = int(time.time() * 1000) + 2000
    with SyncProducer(unique("pop_producer"), ClientConfig(namesrv)) as producer:
        producer.start()
        producer.send(Message(topic, b"later", deliver_time_ms=due))
    with consumer(namesrv, group, topic) as c:
        assert c.receive(1, 30.0, 0.0) == []
        got = c.receive(1, 30.0, 5.0)  # held until it is due
        assert [m.body for m in got] == [b"later"] and time.time() * 1000 >= due - 1000  # timerPrecisionMs 1 s
        c.ack(got[0])
