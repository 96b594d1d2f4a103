"""The operator's view of replication (issue 14) against real processes: Prometheus lag and transfer
metrics on master and slave, ``spark-mq admin cluster`` listing a set's members with roles and lag,
and ``spark-mq dev --replicas 2`` starting a pair that replicates."""

from __future__ import annotations

import bisect
import itertools
import signal
import threading
import time
from contextlib import contextmanager

from broker._support import pull_header
from broker.test_admin import scrape
from cli.conftest import run_cli
from servers import ServerProcess, free_port, unique, wait_until

from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.store.ha.ha_connection import POLL_INTERVAL_S

from .test_replication import QUEUES, REPLICATION_TIMEOUT_S, make_topic, replicated, send_batches, slave_connected

SLAVE_LAG = "spark_mq_ha_slave_lag_bytes"
SLAVE_LAG_SECONDS = "spark_mq_ha_slave_lag_seconds"
SLAVE_ACK = "spark_mq_ha_slave_ack_offset"
LAG_SAMPLES = 60  # scrapes under load that found the slave behind
PRODUCERS = 4  # threads sending batches back to back: the master's end never rests


def per_slave(metrics: dict, name: str) -> dict[str, float]:
    """The samples of ``name`` by their ``slave`` label."""
    return {dict(labels)["slave"]: v for (n, labels), v in metrics.items() if n == name}


def caught_up(pair) -> dict:
    """The master's metrics once its one slave has acknowledged everything."""
    def done():
        m = scrape(pair.master.metrics_url)
        lag = per_slave(m, SLAVE_LAG)
        return m if len(lag) == 1 and list(lag.values()) == [0] else None
    return wait_until(done, REPLICATION_TIMEOUT_S, "the master to report a lag of 0 bytes")


@contextmanager
def stopped(broker):
    """``broker`` SIGSTOPped for the block (it neither reads nor acknowledges), then SIGCONTed."""
    broker.server.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        broker.server.signal(signal.SIGCONT)


def test_metrics_show_lag_per_slave_zero_after_catch_up_and_growing_while_the_slave_is_stopped(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", metrics=True)
    topic = make_topic(api, pair)
    slave_connected(pair)
    send_batches(api, pair.master.addr, topic, 8, seed=3)
    replicated(pair)

    m = caught_up(pair)
    [slave_label] = per_slave(m, SLAVE_LAG)
    assert slave_label.startswith("127.0.0.1:")  # the slave's HA connection
    assert m[("spark_mq_ha_connected_slaves", ())] == 1
    assert per_slave(m, SLAVE_LAG_SECONDS) == {slave_label: 0}
    acked = per_slave(m, "spark_mq_ha_slave_ack_offset")[slave_label]
    assert acked > 8 * 16 * 50
    assert m[("spark_mq_ha_transferred_bytes_total", ())] == acked  # the slave started empty
    s = wait_until(lambda: (got := scrape(pair.slave.metrics_url))[("spark_mq_ha_received_bytes_total", ())] == acked
                   and got, REPLICATION_TIMEOUT_S, "the slave to count what it received")
    assert s[("spark_mq_ha_master_connected", ())] == 1
    assert s[("spark_mq_ha_master_lag_bytes", ())] == 0
    assert not per_slave(s, SLAVE_LAG)  # a slave has no slaves

    with stopped(pair.slave):
        sent = send_batches(api, pair.master.addr, topic, 4, seed=4)  # ASYNC_MASTER: answered without the slave
        behind = wait_until(lambda: (got := scrape(pair.master.metrics_url)) and per_slave(got, SLAVE_LAG)[slave_label]
                            and per_slave(got, SLAVE_LAG_SECONDS)[slave_label] > 0 and got,
                            REPLICATION_TIMEOUT_S, "the master to report the stopped slave behind")
        assert per_slave(behind, SLAVE_LAG)[slave_label] >= sum(map(len, sent))
    m = caught_up(pair)
    assert per_slave(m, SLAVE_LAG_SECONDS) == {slave_label: 0}
    end = per_slave(m, "spark_mq_ha_slave_ack_offset")[slave_label]
    wait_until(lambda: scrape(pair.slave.metrics_url)[("spark_mq_ha_received_bytes_total", ())] == end,
               REPLICATION_TIMEOUT_S, "the slave to count the bytes it caught up")


def set_rows(output: str, *addrs: str) -> dict[str, list[str]]:
    """The cells of the rows of ``spark-mq admin cluster``'s table naming ``addrs``, by address."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        for addr in addrs:
            if addr in cells:
                rows[addr] = cells
    return rows


def test_admin_cluster_lists_the_set_with_roles_and_replication_lag(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    send_batches(api, pair.master.addr, topic, 4, seed=5)
    replicated(pair)
    master, slave = pair.master.addr, pair.slave.addr

    def listed():
        result = run_cli("admin", "cluster", namesrv=namesrv)
        rows = set_rows(result.stdout, master, slave)
        return (result, rows) if len(rows) == 2 and rows[slave][6] == "0" else None
    result, rows = wait_until(listed, REPLICATION_TIMEOUT_S, "admin cluster to show the slave caught up")
    assert result.returncode == 0, result.stderr
    # cluster, broker, id, address, role, commitlog max, lag bytes, lag seconds, state
    assert rows[master][1:5] == [pair.name, "0", master, "SYNC_MASTER"]
    assert rows[slave][1:5] == [pair.name, "1", slave, "SLAVE"]
    assert rows[slave][6:8] == ["0", "0.0"] and rows[master][6:8] == ["-", "-"]
    assert rows[slave][5] == rows[master][5]  # the same commitlog end

    with stopped(pair.slave):
        result = api.send_batch(master, MessageBatch.of(topic, 0, [b"unacknowledged" * 100], [b""]), "ha_producer")
        assert result.status == SendStatus.FLUSH_SLAVE_TIMEOUT  # stored on the master, not acknowledged
        result = run_cli("admin", "cluster", namesrv=namesrv)
    rows = set_rows(result.stdout, master, slave)
    assert result.returncode == 1  # a member did not answer
    assert rows[slave][8].startswith("unreachable")
    assert int(rows[slave][6]) >= 1400 and float(rows[slave][7]) > 0


def test_dev_replicas_2_starts_a_pair_that_replicates(tmp_path, api):
    namesrv = f"127.0.0.1:{free_port()}"
    dev = ServerProcess(["dev", "--replicas", "2", "--namesrv-port", namesrv.rpartition(":")[2], "--port", "0",
                         "--metrics-port", "0", "--store", str(tmp_path / "store")], tmp_path / "dev.log",
                        "spark-mq dev: ", verbose=False)
    try:
        members = wait_until(lambda: len(addrs := api.get_cluster_info(namesrv)
                                         .broker_addr_table["broker-a"].broker_addrs) == 2 and addrs,
                             REPLICATION_TIMEOUT_S, "master and slave registered")
        master, slave = members[0], members[1]
        assert run_cli("admin", "cluster", namesrv=namesrv).returncode == 0
        topic = unique("DevHa")
        for addr in (master, slave):  # topic configs are not replicated yet
            api.create_topic(addr, topic, QUEUES, QUEUES)
        bodies = [f"dev-{i}".encode() for i in range(32)]
        sent = api.send_batch(master, MessageBatch.of(topic, 1, bodies, [b""] * len(bodies)), "dev_producer")
        assert sent.status == SendStatus.SEND_OK

        def pulled():
            result = api.pull_message(slave, pull_header("dev_reader", topic, 1, 0, max_nums=64))
            return result.status == PullStatus.FOUND and [m.body for m in result.messages(check_crc=True)]
        assert wait_until(pulled, REPLICATION_TIMEOUT_S, "the slave to serve what the master stored") == bodies
        assert (tmp_path / "store-slave1").is_dir()
    finally:
        dev.stop_cleanly()


def test_lag_seconds_is_the_age_of_the_oldest_unacknowledged_byte(ha_pair, api):
    """Under a steady producer the slave trails by a few transfers: bytes lag is nonzero in the samples,
    yet the seconds are the age of the oldest byte the slave has not acknowledged (its ack offset in the
    same scrape), not the time since the slave last had the master's whole commitlog. Checked against what
    the producers saw, not against how fast this machine is: that byte was stored after the send of every
    batch starting at or below it began, so it is younger than the newest such send (give or take the
    master's poll interval: it dates bytes when it looks for some to send, as well as after every put;
    "since it last had everything" was past that bound by up to 0.8 s in 56 of 60 samples). While the slave is
    stopped the age of its oldest missing byte grows from one sample to the next."""
    pair = ha_pair("ASYNC_MASTER", metrics=True)
    topic = make_topic(api, pair)
    slave_connected(pair)
    [slave_label] = per_slave(caught_up(pair), SLAVE_LAG)
    stop = threading.Event()
    sends: list[tuple[int, float]] = []  # (commitlog offset of the batch's first message, when its send began)

    def produce() -> None:
        with SyncMQClientAPI(timeout=30.0) as own:
            while not stop.is_set():
                batch = MessageBatch.of(topic, len(sends) % QUEUES, [b"steady" * 40] * 64, [b""] * 64)
                began = time.monotonic()
                result = own.send_batch(pair.master.addr, batch, "ha_producer")
                assert result.status == SendStatus.SEND_OK
                sends.append((parse_offset_msg_id(result.offset_msg_ids[0])[1], began))

    producers = [threading.Thread(target=produce, daemon=True) for _ in range(PRODUCERS)]
    for t in producers:
        t.start()
    behind: list[tuple[int, float, float]] = []  # samples where the slave lacked bytes: (ack offset, lag s, when)
    try:
        def sampled_enough() -> bool:
            m = scrape(pair.master.metrics_url)
            if per_slave(m, SLAVE_LAG)[slave_label] > 0:
                behind.append((int(per_slave(m, SLAVE_ACK)[slave_label]), per_slave(m, SLAVE_LAG_SECONDS)[slave_label],
                               time.monotonic()))
            return len(behind) >= LAG_SAMPLES
        wait_until(sampled_enough, 120, f"{LAG_SAMPLES} samples with the slave behind", interval=0.05)
    finally:
        stop.set()
        for t in producers:
            t.join(60)
    assert len(sends) >= LAG_SAMPLES  # the load ran throughout
    sends.sort()
    firsts = [offset for offset, _ in sends]
    newest_began = list(itertools.accumulate((began for _, began in sends), max))
    too_old = [(acked, lag, round(scraped - newest_began[i], 6)) for acked, lag, scraped in behind
               if (i := bisect.bisect_right(firsts, acked) - 1) >= 0
               and lag > scraped - newest_began[i] + POLL_INTERVAL_S]
    assert too_old == [], "lag seconds older than the oldest unacknowledged byte can be: (ack offset, lag, bound)"
    assert all(lag > 0 for _, lag, _ in behind), behind
    caught_up(pair)

    with stopped(pair.slave):
        send_batches(api, pair.master.addr, topic, 2, seed=6)
        first = wait_until(lambda: per_slave(scrape(pair.master.metrics_url), SLAVE_LAG_SECONDS)[slave_label] or None,
                           REPLICATION_TIMEOUT_S, "the master to report the stopped slave's lag")
        send_batches(api, pair.master.addr, topic, 2, seed=7)
        later = per_slave(scrape(pair.master.metrics_url), SLAVE_LAG_SECONDS)[slave_label]
        assert later > first  # the same oldest missing byte, older now
