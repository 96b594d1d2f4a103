"""Crash loop against a SYNC_MASTER set (issue 14's acceptance): a producer keeps a ledger of every
SEND_OK while the master is SIGKILLed at random moments and restarted, and once its store directory
is deleted and rebuilt from the slave's by docs/operations.md's procedure (``spark-mq copy-store`` from the
stopped slave). At the end the independent reader of the slave's commitlog files, and a new consumer
group pulling from the slave, find every acknowledged message; duplicates and unacknowledged extras
are counted and reported.

A master started on an empty store while its slave holds more is the hazard the procedure avoids:
``test_a_master_on_an_empty_store_never_acknowledges_over_its_slave`` shows what it does instead.
"""

from __future__ import annotations

import random
import shutil
import time

import pytest
from broker._support import pull_header, send_header
from cli.conftest import run_cli
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.errors import MQClientError, SendFailedError
from spark_mq.common.message import Message
from spark_mq.remoting.codes import ResponseCode

from .commitlog_files import read_commitlog
from .ledger import Audit, Ledger, key_of
from .test_replication import QUEUES, REPLICATION_TIMEOUT_S, make_topic, replicated, send_batches, slave_connected

PROGRESS_TIMEOUT_S = 60.0  # a restarted master and its reconnected slave acknowledge again within this
MAX_ACKS_BETWEEN_KILLS = 40


def rebuild_master_from_slave(pair) -> None:
    """docs/operations.md's procedure for a master whose store is lost (its process is down): stop the slave,
    copy its store to the master's, start the master, then the slave."""
    pair.slave.stop()
    done = run_cli("copy-store", "--from", str(pair.slave.store), "--to", str(pair.master.store))
    assert done.returncode == 0, done.stderr
    pair.master.start_again()
    pair.slave.start_again()


def crash_loop(pair, api, namesrv, kills: int, seed: int) -> tuple[Audit, Ledger]:
    """``kills`` SIGKILLs of the master, each after a random number of acknowledgements and a random
    pause; before the middle one's restart the master's store is deleted and rebuilt from the slave."""
    rng = random.Random(seed)
    topic = make_topic(api, pair)
    slave_connected(pair)
    ledger = Ledger(namesrv, topic, body_size=rng.randrange(100, 900)).start()
    try:
        for i in range(kills + 1):
            target = ledger.acknowledged() + rng.randrange(1, MAX_ACKS_BETWEEN_KILLS)
            wait_until(lambda t=target: ledger.acknowledged() >= t, PROGRESS_TIMEOUT_S,
                       f"acknowledgements after restart {i}")
            if i == kills:
                break
            time.sleep(rng.random() / 4)  # a random moment between two sends, or within one
            pair.master.kill()
            if i == kills // 2:
                shutil.rmtree(pair.master.store)  # its disk is lost
                rebuild_master_from_slave(pair)
            else:
                pair.master.start_again()
    finally:
        ledger.stop()
    replicated(pair)  # the slave has everything the master holds, byte for byte
    audit = ledger.audit(read_commitlog(pair.slave.store))
    # and a fresh reader of the slave (its own consume queues) gets every acknowledged message
    pulled = pull_keys(api, pair.slave.addr, topic)
    assert sorted(ledger.acked - pulled) == audit.lost
    return audit, ledger


def pull_keys(api, addr: str, topic: str) -> set[str]:
    """The ledger keys of every message a new consumer group pulls from ``addr``, queue by queue."""
    keys: set[str] = set()
    group = unique("fresh_reader")
    for q in range(QUEUES):
        offset = 0
        while (result := api.pull_message(addr, pull_header(group, topic, q, offset, max_nums=64))).status \
                == PullStatus.FOUND:
            keys.update(key_of(m.body) for m in result.messages(check_crc=True))
            offset = result.next_begin_offset
    return keys


def check(audit: Audit, ledger: Ledger, kills: int) -> None:
    print(f"\ncrash loop: {kills} kills, {audit.summary()}, sent {ledger.sent}, "
          f"failed attempts {dict(ledger.attempts)}")
    assert audit.lost == [], f"acknowledged messages missing from the slave: {audit.lost[:20]}"
    assert audit.acknowledged > kills


def test_crash_loop_loses_no_acknowledged_message(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    audit, ledger = crash_loop(pair, api, namesrv, kills=3, seed=14)
    check(audit, ledger, 3)


@pytest.mark.slow
def test_crash_loop_long(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    kills = 24
    started = time.monotonic()
    audit, ledger = crash_loop(pair, api, namesrv, kills=kills, seed=1414)
    check(audit, ledger, kills)
    print(f"crash loop runtime {time.monotonic() - started:.0f} s")


def test_a_producer_sends_again_as_soon_as_the_killed_master_is_back(ha_pair, api, namesrv):
    """While the master is down the route lists only the slave (no writable queue); the next send
    after the master is back asks the NameServer again, as RocketMQ's tryToFindTopicPublishInfo does
    for a route without queues, instead of failing until the periodic route poll (30 s)."""
    pair = ha_pair("ASYNC_MASTER")
    topic = make_topic(api, pair)
    with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=0) as producer:
        assert producer.send(Message(topic, b"before")).status == SendStatus.SEND_OK
        pair.master.kill()
        wait_until(lambda: routed_ids(api, namesrv, topic, pair.name) == {1}, REPLICATION_TIMEOUT_S,
                   "the NameServer to list only the slave")
        with pytest.raises(SendFailedError, match="cannot connect"):
            producer.send(Message(topic, b"while down"))  # and the route is fetched again after the failure
        with pytest.raises(SendFailedError, match="no writable queue"):
            producer.send(Message(topic, b"while down"))  # the refreshed route has no master
        pair.master.start_again()
        wait_until(lambda: routed_ids(api, namesrv, topic, pair.name) == {0, 1}, REPLICATION_TIMEOUT_S,
                   "the NameServer to list the restarted master")
        assert producer.send(Message(topic, b"after")).status == SendStatus.SEND_OK


def routed_ids(api, namesrv: str, topic: str, name: str) -> set[int]:
    route = api.get_route_info(namesrv, topic)
    return {i for b in (route.broker_datas if route else []) if b.broker_name == name for i in b.broker_addrs}


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_a_master_on_an_empty_store_never_acknowledges_over_its_slave(ha_pair, api, role):
    """The mistake the procedure avoids: a master restarted on an empty store while its slave holds
    the set's commitlog. Once the slave reports an end past the master's, the master refuses sends
    (naming the procedure) instead of acknowledging messages at offsets the slave holds other
    bytes at, which the slave would never get; the procedure then brings the set back."""
    pair = ha_pair(role)
    topic = make_topic(api, pair)
    slave_connected(pair)
    sent = send_batches(api, pair.master.addr, topic, 4, seed=5)
    replicated(pair)
    before = read_commitlog(pair.slave.store)
    pair.master.kill()
    shutil.rmtree(pair.master.store)
    pair.master.start_again()  # on an empty store
    api.create_topic(pair.master.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: "past this master's end 0" in pair.master.log(), REPLICATION_TIMEOUT_S,
               "the slave to report its end to the empty master")
    with pytest.raises(MQClientError) as e:
        api.send_message(pair.master.addr, send_header(topic, 0), b"over the slave's bytes")
    assert e.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "copy-store" in e.value.remark and str(before.end) in e.value.remark
    assert read_commitlog(pair.slave.store).files == before.files  # the slave is untouched

    pair.master.stop()
    shutil.rmtree(pair.master.store)
    rebuild_master_from_slave(pair)
    wait_until(lambda: api.get_broker_runtime_info(pair.master.addr)["haConnectedSlaves"] == "1",
               REPLICATION_TIMEOUT_S, "the slave to connect to the rebuilt master")
    sent += send_batches(api, pair.master.addr, topic, 2, seed=6)
    _, s = replicated(pair)
    assert [u.body for u in s.units] == sent
