"""The controller pushes each election to the brokers (NOTIFY_BROKER_ROLE_CHANGED), real processes: with
the brokers' poll of the controller (``syncBrokerMetadataPeriod``) set to 10 minutes, an elected replica
takes over, and the others follow it, well before any poll could have told them; a notify older than
what a broker knows changes nothing; with the push turned off, the poll alone still fails over."""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.ha.commitlog_files import read_commitlog
from servers import NAMESRV_READY, Broker, ServerProcess, unique, wait_until

from spark_mq.remoting.bodies import SyncStateSet
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import NotifyBrokerRoleChangedRequestHeader

from . import test_broker_failover as failover
from ._support import FAST_CONF, ControllerClient, brokers_conf

embedded = failover.embedded  # a NameServer running the controller (file state)
api = failover.api  # our client API, for routes, topics and sends

POLL_MS = 600_000  # the brokers' syncBrokerMetadataPeriod: after its first, no poll happens within a test
NOTIFIED_S = 30  # how long a broker may take to act on a notify: far below POLL_MS
STALE = "ignored the controller's notify"


@pytest.fixture
def unnotifying(tmp_path):
    """A NameServer running the controller with notifyBrokerRoleChanged=false: brokers learn by polling."""
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"enableControllerInNamesrv=true\ncontrollerStorePath={tmp_path / 'state'}\n"
                    f"notifyBrokerRoleChanged=false\n{FAST_CONF}")
    server = ServerProcess(["namesrv", "-c", str(conf), "--port", "0"], tmp_path / "namesrv.log", NAMESRV_READY,
                           verbose=False)
    yield server
    server.stop_cleanly()


def replicas(api, namesrv: str, root: Path, name: str, ids: tuple[int, ...],
             poll_ms: int = POLL_MS) -> dict[int, Broker]:
    """Controller-mode replicas ``ids`` of set ``name``, the first configured master. The slaves start once
    it is elected and routed as id 0, so their registration (not a poll) tells them their master."""
    conf = f"{brokers_conf(namesrv)}syncBrokerMetadataPeriod={poll_ms}\n"
    first, *others = ids
    started = {first: Broker(namesrv, root / f"replica{first}", f"{conf}brokerId={first}\nbrokerRole=ASYNC_MASTER\n",
                             broker_name=name)}
    wait_until(lambda: failover.route(api, namesrv, "TBW102", name).get(0) == started[first].addr, failover.TIMEOUT_S,
               f"replica {first} elected and routed as id 0")
    for i in others:
        started[i] = Broker(namesrv, root / f"replica{i}", f"{conf}brokerId={i}\nbrokerRole=SLAVE\n", broker_name=name)
    return started


def full_set(api, ctl: ControllerClient, namesrv: str, name: str, brokers: dict[int, Broker]) -> str:
    """A topic on the master, every replica routed and in the SyncStateSet with the master's bytes."""
    master = brokers[min(brokers)]
    topic = unique("Notified")
    api.create_topic(master.addr, topic, 2, 2)
    wanted = {0: master.addr, **{i: b.addr for i, b in brokers.items() if b is not master}}
    wait_until(lambda: failover.route(api, namesrv, topic, name) == wanted, failover.TIMEOUT_S,
               "the route to list the master as 0 and the slaves by their ids")
    failover.send(namesrv, topic, "before", 5)
    failover.caught_up(list(brokers.values()), read_commitlog(master.store).end)
    wait_until(lambda: ctl.replica_info(name).sync_state_set == set(brokers), failover.TIMEOUT_S,
               "every replica in the SyncStateSet")
    return topic


def fail_over(api, ctl: ControllerClient, namesrv: str, name: str, brokers: dict[int, Broker]) -> Broker:
    """SIGKILL master 1; once another replica is routed as id 0, a send to it and the other slave replicating
    from it. Returns the new master."""
    topic = full_set(api, ctl, namesrv, name, brokers)
    brokers[1].kill()
    new_master = wait_until(lambda: next((b for i, b in brokers.items() if i != 1 and failover.route(
        api, namesrv, topic, name).get(0) == b.addr), None), NOTIFIED_S, "a slave routed as id 0")
    assert "becomes its master" in new_master.log()
    failover.send(namesrv, topic, "after", 5)  # SEND_OK from the new master
    other = next(b for i, b in brokers.items() if i != 1 and b is not new_master)
    failover.caught_up([other], read_commitlog(new_master.store).end)  # the other slave follows it
    return new_master


def test_a_killed_master_is_replaced_at_once_not_at_the_next_poll(embedded, api, remoting, tmp_path):
    namesrv = embedded.addr
    ctl = ControllerClient(remoting, namesrv).wait_leading()
    name = unique("notify")
    brokers = replicas(api, namesrv, tmp_path, name, (1, 2, 3))
    try:
        new_master = fail_over(api, ctl, namesrv, name, brokers)
        assert "notified: master of" in new_master.log()
    finally:
        for b in brokers.values():
            b.stop_if_running()


def test_without_the_push_the_poll_alone_fails_over(unnotifying, api, remoting, tmp_path):
    """notifyBrokerRoleChanged=false (a notify lost, in effect): the brokers' poll every 500 ms learns it."""
    namesrv = unnotifying.addr
    ctl = ControllerClient(remoting, namesrv).wait_leading()
    name = unique("polled")
    brokers = replicas(api, namesrv, tmp_path, name, (1, 2, 3), poll_ms=500)
    try:
        new_master = fail_over(api, ctl, namesrv, name, brokers)
        assert "notified" not in new_master.log()
        assert "notified replica" not in unnotifying.log()
    finally:
        for b in brokers.values():
            b.stop_if_running()


def notify(remoting, broker: Broker, master: int, master_address: str, epoch: int, members: set[int]) -> int:
    header = NotifyBrokerRoleChangedRequestHeader(master_address=master_address, master_epoch=epoch,
                                                  sync_state_set_epoch=epoch, master_broker_id=master)
    return remoting.invoke(broker.addr, RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext_fields(),
        SyncStateSet(frozenset(members), epoch).to_json()), timeout=10.0).code


def test_a_designated_election_is_pushed_and_an_older_notify_changes_nothing(embedded, api, remoting, tmp_path):
    namesrv = embedded.addr
    ctl = ControllerClient(remoting, namesrv).wait_leading()
    name = unique("notify")
    brokers = replicas(api, namesrv, tmp_path, name, (1, 2))
    old, new = brokers[1], brokers[2]
    try:
        topic = full_set(api, ctl, namesrv, name, brokers)
        assert ctl.elect(name, 2, designate=True).code == ResponseCode.SUCCESS
        assert ctl.replica_info(name).master_epoch == 2
        wait_until(lambda: failover.route(api, namesrv, topic, name) == {0: new.addr, 1: old.addr}, NOTIFIED_S,
                   "replica 2 routed as master and replica 1 as its slave, both notified")

        # epoch 1 (replica 1 master) is older than the epoch 2 both know: neither changes role
        assert notify(remoting, new, 1, old.addr, 1, {1}) == ResponseCode.SUCCESS
        assert notify(remoting, old, 1, old.addr, 1, {1}) == ResponseCode.SUCCESS
        for b in (new, old):
            wait_until(lambda b=b: STALE in b.log(), failover.TIMEOUT_S, f"{b.addr} to log the stale notify")
        assert "becomes a slave" not in new.log()
        assert old.log().count("becomes its master") == 1  # its first election only
        failover.send(namesrv, topic, "after", 5)
        assert failover.route(api, namesrv, topic, name) == {0: new.addr, 1: old.addr}
        failover.caught_up([old], read_commitlog(new.store).end)
    finally:
        for b in brokers.values():
            b.stop_if_running()
