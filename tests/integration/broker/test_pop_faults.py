"""Pop through crashes, against real processes: a consumer SIGKILLed while it holds messages (they come back
after their invisible time and the others consume them: the only duplicates are exactly those), the same
with orderly pop (per-queue order kept), and a broker SIGKILLed with messages in flight (after its restart
no acknowledged message comes back, no sent message is lost, the unacknowledged ones come back)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.simple_consumer import SyncSimpleConsumer

from ._pop_support import POP_CONF, send_numbered
from ._support import create_routed_topic

INVISIBLE_S = 2.0


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return POP_CONF


def consumer(namesrv: str, group: str, topic: str, order: bool = False) -> SyncSimpleConsumer:
    c = SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name=unique("i")), {topic: "*"}, order=order)
    c.start()
    return c


def start_proc(namesrv: str, topic: str, group: str, log: Path, order: bool, mode: str) -> subprocess.Popen:
    script = Path(__file__).with_name("pop_consumer_proc.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    args = [sys.executable, str(script), namesrv, topic, group, str(INVISIBLE_S), "1" if order else "0", mode]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(log, "ab"), env=env)


def crashy_holder(namesrv: str, topic: str, group: str, tmp_path: Path,
                  order: bool) -> tuple[subprocess.Popen, list[int]]:
    """A consumer process holding a batch it never acknowledges: the process and the numbers it holds."""
    proc = start_proc(namesrv, topic, group, tmp_path / "crashy.log", order, "hold")
    line = proc.stdout.readline().decode().split()
    assert line and line[0] == "HOLD", (tmp_path / "crashy.log").read_text()
    return proc, [int(n) for n in line[1:]]


def consume_all(c: SyncSimpleConsumer, expect: int, timeout_s: float = 30.0) -> list:
    """Receive and acknowledge until ``expect`` distinct numbers were seen (and nothing more comes)."""
    got = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = c.receive(16, 30.0, 1.0)
        got.extend(batch)
        for m in batch:
            c.ack(m)
        if not batch and len({int(m.body) for m in got}) >= expect:
            break
    return got


@pytest.mark.parametrize("order", [False, True], ids=["pop", "orderly"])
def test_messages_a_killed_consumer_held_come_back_to_the_others_and_are_the_only_duplicates(
        broker, namesrv, tmp_path, order):
    topic, group = unique("PopKill"), unique("pop_kill")
    create_routed_topic(broker, topic, 2)
    queue_of = send_numbered(namesrv, topic, 100, keyed=True)
    proc, held = crashy_holder(namesrv, topic, group, tmp_path, order)
    try:
        with consumer(namesrv, group, topic, order) as c:
            first = c.receive(16, 30.0, 0.5)  # while the process lives and holds its batch
            for m in first:
                c.ack(m)
            assert not {int(m.body) for m in first} & set(held)
            proc.kill()
            proc.wait()
            rest = consume_all(c, 100 - len(first))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    mine = [int(m.body) for m in first + rest]
    assert sorted(set(mine) | set(held)) == list(range(100))  # nothing lost
    everything = Counter(mine + held)
    assert sorted(n for n, k in everything.items() if k > 1) == sorted(held)  # duplicates: exactly what it held
    redelivered = [m for m in rest if int(m.body) in held]
    assert {int(m.body) for m in redelivered} == set(held)
    if not order:  # redelivered through the pop retry topic
        assert all(m.delivery_attempt == 2 for m in redelivered)
    else:  # per queue, the numbers come in the order they were sent, the held ones again first
        for q in set(queue_of.values()):
            seq = [int(m.body) for m in first + rest if queue_of[int(m.body)] == q]
            assert seq == sorted(seq), f"queue {q} out of order: {seq}"


def test_a_broker_killed_with_messages_in_flight_loses_nothing_and_redelivers_only_the_unacknowledged(
        own_broker, namesrv):
    broker = own_broker("popcrash")
    topic, group = unique("PopBk"), unique("pop_bk")
    create_routed_topic(broker, topic, 2)
    send_numbered(namesrv, topic, 100)
    with consumer(namesrv, group, topic) as c:
        popped = []
        while len(popped) < 50:
            popped.extend(c.receive(10, INVISIBLE_S, 0.5))
        acked = popped[:30]
        for m in acked:
            c.ack(m)
    broker.kill()
    broker.start_again()
    with consumer(namesrv, group, topic) as c:
        time.sleep(INVISIBLE_S)
        after = consume_all(c, 70)
    acked_numbers = {int(m.body) for m in acked}
    after_numbers = [int(m.body) for m in after]
    assert not acked_numbers & set(after_numbers)  # no acknowledged message again
    assert sorted(acked_numbers | set(after_numbers)) == list(range(100))  # none lost
    unacked = {int(m.body) for m in popped[30:]}
    assert unacked <= set(after_numbers)  # the unacknowledged came back
    assert len(after_numbers) == len(set(after_numbers))


@pytest.mark.slow
def test_consumers_killed_again_and_again_while_others_work_lose_nothing_and_duplicate_exactly_what_they_held(
        broker, namesrv, tmp_path):
    """3 consumer processes acknowledge everything they receive while 8 other consumer processes each take a
    batch and are SIGKILLed holding it, one by one: every message is acknowledged, and the messages received twice are
    exactly those the killed ones held."""
    topic, group, count = unique("PopChurn"), unique("pop_churn"), 2000
    create_routed_topic(broker, topic, 2)
    send_numbered(namesrv, topic, count)
    received: Counter[int] = Counter()
    acked: set[int] = set()
    lock = threading.Lock()

    def read(proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            kind, n = line.decode().split()
            with lock:
                if kind == "RECV":
                    received[int(n)] += 1
                else:
                    acked.add(int(n))

    workers = [start_proc(namesrv, topic, group, tmp_path / "workers.log", False, "work") for _ in range(3)]
    for proc in workers:
        threading.Thread(target=read, args=(proc,), daemon=True).start()
    held: list[int] = []
    try:
        holders = [start_proc(namesrv, topic, group, tmp_path / "crashy.log", False, "hold") for _ in range(8)]
        for proc in holders:  # started together (their start-up is the slow part), killed one by one
            line = proc.stdout.readline().decode().split()
            assert line[1:], "no message left to hold: the workers were faster than the holders' start"
            held.extend(int(n) for n in line[1:])
            time.sleep(0.3)
            proc.kill()
            proc.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(acked) < count:
            time.sleep(0.5)
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()
    with lock:
        assert acked == set(range(count))  # nothing lost
        received.update(held)
        assert sorted(n for n, k in received.items() if k > 1) == sorted(set(held))  # duplicates: exactly the held
