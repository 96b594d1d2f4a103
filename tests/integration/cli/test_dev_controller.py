"""``spark-mq dev --replicas 3 --controller``: one process runs a NameServer with the replication controller
embedded and three controller-mode replicas; the controller elects replica 1, the set forms, a send is
acknowledged by all three, and ``spark-mq admin controller`` / ``admin cluster`` show the leader, the master,
the epochs and the SyncStateSet. (The dev process holds every broker, so failover itself is tested with
separate processes in tests/integration/controller.)"""

from __future__ import annotations

from servers import ServerProcess, free_port, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.common.message import Message

from .conftest import run_cli

TIMEOUT_S = 60
SET = "broker-a"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")[1:-1]]


def test_dev_with_the_controller_elects_a_master_and_admin_shows_the_set(tmp_path, api):
    namesrv = f"127.0.0.1:{free_port()}"
    store = tmp_path / "store"
    dev = ServerProcess(["dev", "--replicas", "3", "--controller", "--namesrv-port", namesrv.rpartition(":")[2],
                         "--port", "0", "--metrics-port", "0", "--store", str(store)], tmp_path / "dev.log",
                        "spark-mq dev: ", verbose=False)
    try:
        # replica 1 elected: registered as id 0, replicas 2 and 3 by their ids
        members = wait_until(lambda: (d := api.get_cluster_info(namesrv).broker_addr_table.get(SET)) is not None
                             and set(d.broker_addrs) == {0, 2, 3} and d.broker_addrs, TIMEOUT_S,
                             "the set registered with replica 1 as master")
        master = members[0]

        def controller_row() -> list[str] | None:
            done = run_cli("admin", "controller", namesrv=namesrv)
            row = next((_cells(line) for line in done.stdout.splitlines() if line.startswith(f"│ {SET} ")), None)
            return row if done.returncode == 0 and row and row[3].count("@") == 3 else None

        row = wait_until(controller_row, TIMEOUT_S, "every replica in the SyncStateSet")
        assert row[1] == f"1@{master}" and row[2] == "1"  # the master and its epoch
        assert row[3] == f"1@{master}, 2@{members[2]}, 3@{members[3]}" and row[5] == "-"
        roles = run_cli("admin", "controller", namesrv=namesrv).stdout
        assert any(namesrv in line and "leader" in line for line in roles.splitlines()), roles

        topic = unique("DevController")
        api.create_topic(master, topic, 2, 2)
        with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=2) as producer:
            assert producer.send(Message(topic, b"to all three")).status == SendStatus.SEND_OK

        cluster = run_cli("admin", "cluster", namesrv=namesrv)
        assert cluster.returncode == 0, cluster.stdout + cluster.stderr
        rows = {r[2]: r for line in cluster.stdout.splitlines() if len(r := _cells(line)) == 11 and r[1] == SET}
        # NameServer id -> replica id at the controller; every one in epoch 1, which began at offset 0
        assert {nid: (r[3], r[9], r[10]) for nid, r in rows.items()} == {
            "0": (master, "1", "1 (0)"), "2": (members[2], "2", "1 (0)"), "3": (members[3], "3", "1 (0)")}
        assert (tmp_path / "store-controller" / "state.json").is_file()
        assert (tmp_path / "store-replica3").is_dir()
    finally:
        dev.stop_cleanly()


def test_dev_controller_needs_replicas(tmp_path):
    done = run_cli("dev", "--controller", "--namesrv-port", "0", "--port", "0", "--store", str(tmp_path / "s"))
    assert done.returncode == 2
    assert "--controller elects a master among replicas: give --replicas 2 or more" in done.stderr
