"""Delay levels with the official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4): its producer sends with
``set_delay_time_level`` to a broker with ``messageDelayLevel=1s 2s 3s``, and its push consumer receives each
message no earlier than its level's delay after it was born, and within about a second after that (plus slack
for a loaded machine). Real ``spark-mq namesrv`` / ``spark-mq broker`` processes; skipped without the client."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from servers import Broker, unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI

try:
    from rocketmq.client import Message, Producer, PushConsumer, SendStatus
    from rocketmq.ffi import dll
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

pytestmark = pytest.mark.timeout(120)

DELAYS_MS = {1: 1000, 2: 2000, 3: 3000}
WITHIN_MS = 1000  # the acceptance bound after the delay...
SLACK_MS = 2000  # ...plus what a loaded, shared machine adds (the C++ consumer's pull loop included)
PER_LEVEL = 3


def test_cpp_delay_levels_arrive_no_earlier_than_their_delay(tmp_path: Path, namesrv):
    broker = Broker(namesrv, tmp_path / "b", "messageDelayLevel=1s 2s 3s\n", broker_name=unique("cppdelay"))
    topic, group = unique("CppDelay"), unique("cpp_delay")
    got: dict[str, tuple[int, int, int, int]] = {}  # body -> (level, born ms, store ms, received ms)
    lock = threading.Lock()

    def on_message(msg) -> None:
        received = int(time.time() * 1000)
        with lock:
            body = msg.body.decode()
            got.setdefault(body, (int(msg.get_property("level") or 0), msg.born_timestamp, msg.store_timestamp,
                                  received))

    try:
        with SyncMQClientAPI(timeout=5.0) as api:
            api.create_topic(broker.addr, topic, 2, 2)
            wait_until(lambda: api.get_route_info(namesrv, topic), what=f"route of {topic}")
        consumer = PushConsumer(group)
        consumer.set_instance_name(unique("cpp_c"))
        consumer.set_namesrv_addr(namesrv)
        consumer.subscribe(topic, on_message)
        producer = Producer(unique("cpp_p"))
        dll.SetProducerInstanceName(producer._handle, unique("cpp_pi").encode())
        producer.set_namesrv_addr(namesrv)
        consumer.start()
        producer.start()
        try:
            sent = []
            for level in DELAYS_MS:
                for i in range(PER_LEVEL):
                    m = Message(topic)
                    m.set_body(f"L{level}-{i}")
                    m.set_property("level", str(level))
                    m.set_delay_time_level(level)
                    assert producer.send_sync(m).status == SendStatus.OK
                    sent.append(f"L{level}-{i}")
            wait_until(lambda: len(got) >= len(sent), 60, "every delayed message at the C++ consumer")
        finally:
            producer.shutdown()
            consumer.shutdown()
        assert sorted(got) == sorted(sent)
        for body, (level, born, stored, received) in got.items():
            delay = DELAYS_MS[level]
            assert stored - born >= delay, f"{body} stored in its topic {delay - (stored - born)} ms before its delay"
            assert received - born >= delay, f"{body} received {delay - (received - born)} ms before its delay"
            late = received - born - delay
            assert late <= WITHIN_MS + SLACK_MS, f"{body} received {late} ms after its delay"
        print("C++ delay lateness ms:", sorted(received - born - DELAYS_MS[level]
                                               for level, born, _, received in got.values()))
    finally:
        broker.stop_if_running()
