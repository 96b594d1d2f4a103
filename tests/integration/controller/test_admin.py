"""``spark-mq admin controller`` against real controller processes: each controller's role, and the
leader's view of a broker set (master, epochs, SyncStateSet, replicas outside it, alive or dead)."""

from __future__ import annotations

import subprocess
import sys

from servers import free_addr, unique

from spark_mq.remoting.codes import ResponseCode

from ._support import ControllerClient, start_controller
from .conftest import replica_set


def _admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_mq.cli", "admin", "controller", *args],
                          capture_output=True, text=True, timeout=60)


def test_admin_controller_shows_roles_masters_epochs_and_sync_state_sets(tmp_path, remoting):
    store = tmp_path / "store"
    first = start_controller(tmp_path / "a", store=store)
    leader = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", store=store)
    down = free_addr()  # nothing listens there
    try:
        name = unique("admin")
        brokers = replica_set(name)
        for b in brokers:
            leader.register(b.name, b.broker_id, b.address)
        for b in brokers[:2]:
            leader.heartbeat(b.name, b.broker_id, b.address)
        assert leader.elect(name, 1).code == ResponseCode.SUCCESS
        assert leader.alter(name, 1, 1, {0, 1}, 1).code == ResponseCode.SUCCESS

        done = _admin("--controller", f"{second.addr};{first.addr};{down}", "--broker-name", name)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert any(first.addr in line and "leader" in line for line in lines), done.stdout
        assert any(second.addr in line and "follower" in line for line in lines), done.stdout
        assert any(down in line and "unreachable" in line for line in lines), done.stdout
        row = next(line for line in lines if name in line)
        assert "1@127.0.0.1:20001" in row  # the master
        assert "0@127.0.0.1:20000, 1@127.0.0.1:20001" in row  # the SyncStateSet, both alive
        assert "2@127.0.0.1:20002 (dead)" in row  # outside it, never heard from
        assert row.split("│")[3].strip() == "1" and row.split("│")[5].strip() == "2"  # master epoch, set epoch
    finally:
        second.stop_cleanly()
        first.stop_cleanly()


def test_admin_controller_with_no_leader_says_so_and_fails(tmp_path):
    done = _admin("--controller", free_addr(), "--broker-name", "b")
    assert done.returncode == 1
    assert "unreachable" in done.stdout and "no controller leads" in done.stdout
