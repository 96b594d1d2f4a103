"""Support of the producer tests: brokers with names (``BrokerProc``, restartable on the same port
and store, killable), topics created on several brokers, and reading queues back; processes are
started and stopped with the helpers of ``tests/peers/peer_helpers.py`` (via ``_servers``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message_unit import StoredMessage
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag

sys.path.insert(0, str(Path(__file__).parents[2] / "peers"))

from peer_helpers import SMALL_BROKER_CONF, ServerProcess, start_broker, stop_cleanly


def wait_until(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last: {value!r})")
        time.sleep(0.05)


@dataclass
class BrokerProc:
    """A ``spark-mq broker`` named ``name``; ``start`` again reuses its port and store."""

    name: str
    namesrv: str
    root: Path
    server: ServerProcess | None = None

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def addr(self) -> str:
        assert self.server is not None
        return self.server.addr

    def start(self) -> BrokerProc:
        conf = self.root / "broker.conf"
        if not conf.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            conf.write_text(SMALL_BROKER_CONF + f"brokerName={self.name}\n")
        port = self.server.port if self.server is not None else 0
        self.server = start_broker(self.namesrv, self.store, self.root / "broker.log", port=port)
        return self

    def kill(self) -> None:
        """SIGKILL: a crash, the NameServer is not told."""
        assert self.server is not None
        self.server.proc.kill()
        self.server.proc.wait(20)
        if self.server.proc.stdout is not None:
            self.server.proc.stdout.close()

    def stop(self) -> None:
        if self.server is not None and self.server.proc.poll() is None:
            stop_cleanly(self.server, self.store)


def create_topic(api: SyncMQClientAPI, namesrv: str, brokers: list[BrokerProc], topic: str, queues: int = 4) -> None:
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
