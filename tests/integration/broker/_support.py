"""Shared pieces of the broker integration tests: builders for the request headers the tests send
(the ``spark-mq namesrv`` / ``spark-mq broker`` subprocesses come from ``tests/servers.py``)."""

from __future__ import annotations

import socket
import time

from spark_mq.common.properties import encode_properties
from spark_mq.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader, build_pull_sys_flag

# --- request builders -----------------------------------------------------------------------


def send_header(topic: str, queue_id: int = -1, *, tags: str | None = None, keys: str | None = None,
                uniq_key: str | None = None, props: dict[str, str] | None = None,
                group: str = "itest_producer") -> SendMessageRequestHeader:
    """A SEND_MESSAGE header as a RocketMQ producer builds it (default topic TBW102, 4 queues)."""
    p = dict(props or {})
    if tags is not None:
        p["TAGS"] = tags
    if keys is not None:
        p["KEYS"] = keys
    if uniq_key is not None:
        p["UNIQ_KEY"] = uniq_key
    p.setdefault("WAIT", "true")
    return SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0, properties=encode_properties(p).decode())


def pull_header(group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
                suspend_ms: int = 0, subscription: str | None = None,
                commit_offset: int | None = None) -> PullMessageRequestHeader:
    """A PULL_MESSAGE header; ``suspend_ms`` > 0 sets the suspend flag (long polling)."""
    return PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=build_pull_sys_flag(commit_offset=commit_offset is not None, suspend=suspend_ms > 0,
                                     subscription=subscription is not None),
        commit_offset=commit_offset if commit_offset is not None else 0, suspend_timeout_millis=suspend_ms,
        sub_version=0, subscription=subscription)



# --- raw sockets ----------------------------------------------------------------------------


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    """True once the server closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
