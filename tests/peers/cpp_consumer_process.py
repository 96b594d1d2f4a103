"""A C++ client consumer (PyPI ``rocketmq`` 0.4.4) in a process of its own, so a test can SIGSTOP and SIGCONT it
like any other process: ``python cpp_consumer_process.py push|pull NAMESRV GROUP TOPIC INSTANCE`` (the push
consumer's instance name; the library's C API sets none for a pull consumer).

It prints ``READY`` once started, then ``MSG <seq> <queueId> <queueOffset> <msgId>`` for every message it receives
(``seq`` is the message's ``seq`` property, ``msgId`` its id as the library gives it), flushed at once; on SIGTERM
it shuts the client down (a push consumer commits its offsets then) and prints ``DONE``. ``push`` is a clustering
push consumer; ``pull`` a pull consumer that pulls every queue of the topic from offset 0 on, round after round (the
binding's own ``PullConsumer.pull`` keeps its offsets in a class attribute, so this calls the library's ``Pull``
itself).
"""

from __future__ import annotations

import ctypes
import sys
import threading

from peer_helpers import run_until_sigterm
from rocketmq.client import PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import _CMessageQueue, _CPullStatus, dll

PULL_BATCH = 32
# the library logs every failed pull, and its push consumer retries one at once: with a master gone that is 100 MB a
# minute, so its log files are capped (3 of 10 MB)
LOG_FILES, LOG_FILE_BYTES = 3, 10 << 20
IDLE_S = 0.05  # between pull rounds that found nothing
_out = threading.Lock()


def emit(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def on_message(msg) -> None:
    seq = (msg.get_property("seq") or b"").decode()
    emit(f"MSG {seq} {msg.queue_id} {msg.queue_offset} {msg.id}")


def run_push(namesrv: str, group: str, topic: str, instance: str, stop: threading.Event) -> None:
    consumer = PushConsumer(group)
    ffi_check(dll.SetPushConsumerLogFileNumAndSize(consumer._handle, LOG_FILES, LOG_FILE_BYTES))
    consumer.set_instance_name(instance)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)
    consumer.start()
    emit("READY")
    stop.wait()
    consumer.shutdown()


def pull_round(consumer: PullConsumer, topic: str, next_offsets: dict[int, int]) -> int:
    """One PULL of every queue of ``topic`` from where the last one ended; how many messages arrived."""
    queues = ctypes.POINTER(_CMessageQueue)()
    count = ctypes.c_int()
    if dll.FetchSubscriptionMessageQueues(consumer._handle, topic.encode(), ctypes.pointer(queues),
                                          ctypes.pointer(count)) != 0:
        return 0
    got = 0
    try:
        for i in range(count.value):
            mq = queues[i]
            result = dll.Pull(consumer._handle, ctypes.pointer(mq), b"*", next_offsets.get(mq.queueId, 0), PULL_BATCH)
            try:
                if result.pullStatus != _CPullStatus.BROKER_TIMEOUT:  # what the library answers a failed pull
                    next_offsets[mq.queueId] = result.nextBeginOffset
                if result.pullStatus == _CPullStatus.FOUND:
                    for j in range(result.size):
                        on_message(RecvMessage(result.msgFoundList[j]))
                    got += result.size
            finally:
                dll.ReleasePullResult(result)
    finally:
        dll.ReleaseSubscriptionMessageQueue(queues)
    return got


def run_pull(namesrv: str, group: str, topic: str, instance: str, stop: threading.Event) -> None:
    consumer = PullConsumer(group)
    ffi_check(dll.SetPullConsumerLogFileNumAndSize(consumer._handle, LOG_FILES, LOG_FILE_BYTES))
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    emit("READY")
    next_offsets: dict[int, int] = {}
    while not stop.is_set():
        if not pull_round(consumer, topic, next_offsets):
            stop.wait(IDLE_S)
    consumer.shutdown()


def main() -> None:
    mode, namesrv, group, topic, instance = sys.argv[1:6]
    runner = {"push": run_push, "pull": run_pull}[mode]
    run_until_sigterm(lambda stop: runner(namesrv, group, topic, instance, stop))


if __name__ == "__main__":
    main()
