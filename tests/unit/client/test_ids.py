"""Client ids and UNIQ_KEYs: RocketMQ's layout, uniqueness, ordering, vectorised == scalar."""

from __future__ import annotations

import os
import re
import socket
import struct
from datetime import datetime

import pytest
from unit_helpers import FakeClock

from spark_mq.client import ids
from spark_mq.client.ids import (
    UniqKeyGenerator,
    client_id,
    month_bounds,
    parse_uniq_key,
    uniq_key,
    uniq_key_time,
    uniq_keys,
)

NOW = datetime(2024, 3, 14, 15, 9, 26, 535000).timestamp()  # local time, mid-month


def generator(clock=None, **kw) -> UniqKeyGenerator:
    return UniqKeyGenerator(ip=kw.pop("ip", "10.1.2.3"), pid=kw.pop("pid", 0x12345), seed=kw.pop("seed", 0xCAFEBABE),
                            clock=clock or FakeClock(NOW))


def java_layout(ip: str, pid: int, seed: int, month_ms: int, counter: int) -> str:
    """MessageClientIDSetter, step by step: a 10-byte buffer with the pid int at 2 overwritten by the
    4-byte IP at 0, the class-loader hash at 6; then int (now - startOfMonth) and short counter."""
    fix = bytearray(10)
    fix[2:6] = struct.pack(">i", pid if pid < 2**31 else pid - 2**32)
    fix[0:4] = socket.inet_aton(ip)
    fix[6:10] = struct.pack(">I", seed)
    tail = struct.pack(">i", (month_ms + 2**31) % 2**32 - 2**31) + struct.pack(">h", (counter + 2**15) % 2**16 - 2**15)
    return (bytes(fix) + tail).hex().upper()


def test_scalar_key_has_rocketmq_layout():
    clock = FakeClock(NOW)
    gen = generator(clock)
    start, _ = month_bounds(int(NOW * 1000))
    month_ms = int(NOW * 1000) - start
    keys = [gen.next() for _ in range(3)]
    assert keys == [java_layout("10.1.2.3", 0x12345, 0xCAFEBABE, month_ms, c) for c in range(3)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    parts = parse_uniq_key(keys[2])
    assert (parts.ip, parts.pid, parts.seed, parts.month_ms, parts.counter) == (
        "10.1.2.3", 0x2345, 0xCAFEBABE, month_ms, 2)
    assert keys[0].startswith(gen.prefix) and parts.prefix == gen.prefix == "0A0102032345CAFEBABE"


def test_month_time_follows_the_clock_and_restarts_each_month():
    clock = FakeClock(NOW)
    gen = generator(clock)
    first = parse_uniq_key(gen.next()).month_ms
    clock.advance(1.5)
    assert parse_uniq_key(gen.next()).month_ms == first + 1500
    clock.now = datetime(2024, 4, 1, 0, 0, 2).timestamp()  # two seconds into the next month
    key = gen.next()
    assert parse_uniq_key(key).month_ms == 2000
    assert uniq_key_time(key, now_ms=int(clock.now * 1000) + 10) == int(clock.now * 1000)


def test_uniq_key_time_reads_last_month_for_a_key_from_the_future():
    key = generator(FakeClock(NOW)).next()
    made = int(NOW * 1000)
    assert uniq_key_time(key, now_ms=made + 60_000) == made
    next_month_early = int(datetime(2024, 4, 1, 0, 0, 1).timestamp() * 1000)
    assert uniq_key_time(key, now_ms=next_month_early) == made


@pytest.mark.parametrize("n", [1, 5, 65_535, 65_536, 65_537, 140_000])
def test_vectorised_equals_scalar(n):
    a, b, c = generator(FakeClock(NOW)), generator(FakeClock(NOW)), generator(FakeClock(NOW))
    # start all mid-block so the wrap falls inside the batch
    for gen in (a, b, c):
        for _ in range(40_000):
            gen.next()
    vector = a.next_many(n)
    assert vector.dtype == "S32" and vector.shape == (n,)
    scalar = [b.next() for _ in range(n)]
    assert [k.decode() for k in vector.tolist()] == scalar
    assert c.next_few(n) == vector.tolist()  # the small batch's keys, one by one
    assert a.next() == b.next() == c.next()  # and they leave the same state behind


def test_keys_are_unique_and_increasing_even_past_65536_per_millisecond():
    clock = FakeClock(NOW)
    gen = generator(clock)
    keys = [k.decode() for k in gen.next_many(200_000).tolist()]
    keys += [gen.next() for _ in range(10)]
    clock.advance(-5)  # the clock steps back: keys must not
    keys += [k.decode() for k in gen.next_many(70_000).tolist()] + [gen.next()]
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys)
    # the Java counter keeps counting across calls; the month time moves on 1 ms per wrap
    assert parse_uniq_key(keys[65_536]).counter == 0
    assert parse_uniq_key(keys[65_536]).month_ms == parse_uniq_key(keys[0]).month_ms + 1


def test_generators_of_one_host_differ_in_prefix():
    a, b = UniqKeyGenerator(), UniqKeyGenerator()
    assert a.prefix[:12] == b.prefix[:12]  # same ip and pid
    assert a.prefix != b.prefix  # different seeds
    assert parse_uniq_key(a.next()).pid == os.getpid() & 0xFFFF


def test_process_wide_generator_and_bad_keys():
    k1, batch, k2 = uniq_key(), uniq_keys(3), uniq_key()
    keys = [k1, *(k.decode() for k in batch.tolist()), k2]
    assert keys == sorted(keys) and len(set(keys)) == 5
    assert uniq_keys(0).shape == (0,)
    for bad in ("", "XYZ", "0" * 31, "G" * 32):
        with pytest.raises(ValueError, match="not a UNIQ_KEY"):
            parse_uniq_key(bad)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_its_own_generator():
    parent = uniq_key()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report a key and leave at once
        os.write(write, uniq_key().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert parse_uniq_key(child).pid == pid & 0xFFFF
    assert child[:20] != parent[:20]
    assert ids._generator().prefix == parent[:20]


def test_client_id_formats():
    assert client_id(ip="10.0.0.7") == f"10.0.0.7@{os.getpid()}"
    assert client_id("worker-1", ip="10.0.0.7") == "10.0.0.7@worker-1"
    assert client_id("worker-1", unit_name="u1", ip="10.0.0.7") == "10.0.0.7@worker-1@u1"
    unique = client_id(ip="10.0.0.7", unique=True)
    assert re.fullmatch(rf"10\.0\.0\.7@{os.getpid()}#\d+", unique) and unique != client_id(ip="10.0.0.7", unique=True)
    assert client_id().split("@")[0] == ids.local_ip()
    socket.inet_aton(ids.local_ip())
