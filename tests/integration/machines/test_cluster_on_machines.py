"""A cluster as it runs on machines: a NameServer, a controller and a three-replica broker set in
controller mode (allAckInSyncStateSet), each process on a host of its own (a network namespace, bound to
that host's address), and our client on the root namespace's address on the bridge. A producer keeps a
ledger of every acknowledged message; a consumer reads them; the master is SIGKILLed; the controller
elects another; the producer goes on; everything acknowledged is read back (none lost, duplicates
reported). Then a process on a fourth host with no credentials tries to read, write, register an
impostor broker at the NameServer and stream the master's commitlog from its HA port.

``acl`` and ``tls`` are one switch each (``_cluster.Security``): with either on the stranger gets
nothing (with the ACL alone, every request answered NO_PERMISSION); with neither
(``allowInsecureRemote=true``) it gets all of it, which is what they are for.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import ExitStack

import pytest
from integration.controller._support import TIMEOUT_S, ReplicaSet, route, started_with_a_topic
from integration.ha.ledger import Ledger
from servers import unique, wait_until

from spark_mq.remoting.codes import ResponseCode

from ._cluster import (
    HA_PORT,
    REPO,
    Security,
    broker_host_conf,
    read_back,
    start_controller_on,
    start_namesrv_on,
)

ROLES = ["namesrv", "controller", "replica1", "replica2", "replica3", "stranger"]
REPLICAS = (1, 2, 3)
ACKED_PER_PHASE = 150  # acknowledged sends before the kill, and again after the new master's first
STRANGER = REPO / "tests" / "integration" / "machines" / "stranger.py"
STRANGER_TIMEOUT_S = 60


def replica(i: int) -> str:
    return f"replica{i}"


def in_sync(api, controller: str, rs: ReplicaSet) -> set[int]:
    """The replicas the controller has in the set's SyncStateSet."""
    info = api.get_sync_state_data(controller, [rs.name]).replicas_info_table.get(rs.name)
    return {r.broker_id for r in info.in_sync_replicas} if info else set()


def stranger_tries(net, namesrv: str, master: str, topic: str, impostor: str) -> dict:
    """What the stranger's attempts came to (stranger.py, run on its own host)."""
    host = master.rpartition(":")[0]
    done = net.run("stranger", [sys.executable, str(STRANGER), f"--namesrv={namesrv}", f"--broker={master}",
                                f"--ha={host}:{HA_PORT}", f"--topic={topic}", f"--impostor={impostor}"],
                   STRANGER_TIMEOUT_S, capture_output=True, text=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=f"{REPO / 'tests'}{os.pathsep}{REPO}"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# the suite runs the cluster as it is meant to run (ACL and TLS); the other settings (each ~30 s) are slow: the
# insecure one shows the stranger's probe gets everything without them
@pytest.mark.parametrize(("acl", "tls"), [pytest.param(False, False, id="insecure", marks=pytest.mark.slow),
                                          pytest.param(True, False, id="acl", marks=pytest.mark.slow),
                                          pytest.param(False, True, id="tls", marks=pytest.mark.slow),
                                          pytest.param(True, True, id="acl+tls")])
def test_cluster_on_machines_fails_over_losing_nothing_and_a_stranger_gets_nothing(network, tmp_path, acl, tls):
    net = network(ROLES)
    security = Security(acl, tls, tmp_path / "security")
    security.prepare([net.gateway, *(h.address for h in net.hosts.values())])
    with ExitStack() as stack:
        namesrv = start_namesrv_on(net, "namesrv", tmp_path / "namesrv", security)
        stack.callback(namesrv.stop_cleanly)
        controller = start_controller_on(net, "controller", tmp_path / "controller", security)
        stack.callback(controller.stop_cleanly)
        rs = ReplicaSet(namesrv.addr, tmp_path, "allAckInSyncStateSet=true\n", controller.addr,
                        replica_conf={i: broker_host_conf(net, replica(i), security) for i in REPLICAS},
                        launchers={i: net.launcher(replica(i)) for i in REPLICAS})
        stack.callback(rs.stop)
        api = security.api(namesrv.addr)
        stack.callback(api.close)
        topic = started_with_a_topic(api, namesrv.addr, rs)
        config = security.client_config(namesrv.addr)
        full = set(REPLICAS)
        wait_until(lambda: in_sync(api, controller.addr, rs) == full, TIMEOUT_S, "every replica in sync")

        ledger = Ledger(namesrv.addr, topic, config=config).start()
        stack.callback(ledger.stop)
        wait_until(lambda: ledger.acknowledged() >= ACKED_PER_PHASE, TIMEOUT_S, "sends acknowledged")
        before = ledger.acked_keys()
        consumed = read_back(config, unique("netns_cg"), topic)
        assert not before - consumed.keys(), "acknowledged messages a consumer could not read"

        wait_until(lambda: in_sync(api, controller.addr, rs) == full, TIMEOUT_S, "every replica still in sync")
        old = rs.brokers[1]
        old.kill()
        killed = time.monotonic()
        new_master = wait_until(lambda: route(api, namesrv.addr, topic, rs.name).get(0) not in (None, old.addr)
                                and route(api, namesrv.addr, topic, rs.name)[0], TIMEOUT_S, "another master routed")
        resumed = wait_until(lambda: ledger.first_ack_after(killed, old.addr), TIMEOUT_S, "a send after the kill")
        target = ledger.acknowledged() + ACKED_PER_PHASE
        wait_until(lambda: ledger.acknowledged() >= target, TIMEOUT_S, "sends acknowledged by the new master")
        ledger.stop()

        acked = ledger.acked_keys()
        found = read_back(config, unique("netns_cg"), topic)
        lost = sorted(acked - found.keys())
        duplicates = sum(n - 1 for n in found.values())
        print(f"\ncluster on machines (acl={acl}, tls={tls}): acknowledged {len(acked)}, lost {len(lost)}, "
              f"duplicates {duplicates}, first send after the kill {resumed - killed:.2f} s, new master "
              f"{new_master}, failed attempts {dict(ledger.attempts)}")
        assert not lost, f"acknowledged messages missing after the failover: {lost[:20]}"

        impostor = unique("impostor")
        tried = stranger_tries(net, namesrv.addr, new_master, topic, impostor)
        print(f"a stranger without credentials: {tried}")
        routed = {b.broker_name for b in api.get_route_info(namesrv.addr, topic).broker_datas}
        if acl or tls:
            assert tried["read"] != "ok" and tried["write"] != "ok" and tried["register"] != "ok", tried
            if not tls:  # through TLS a plaintext stranger is not even served
                no = ResponseCode.NO_PERMISSION.name
                assert (tried["read"], tried["write"], tried["register"]) == (no, no, no), tried
            assert tried["ha_bytes"] == 0, "a stranger streamed the master's commitlog"
            assert impostor not in routed
        else:  # what ACL and TLS are for: without them, the stranger gets all of it
            assert (tried["read"], tried["write"], tried["register"]) == ("ok", "ok", "ok"), tried
            assert tried["ha_bytes"] > 0
            assert impostor in routed
