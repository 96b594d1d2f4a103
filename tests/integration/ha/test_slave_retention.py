"""Tiered storage and retention on a slave (issue 14), between real master and slave processes: the
slave copies its master's tiered-storage watermarks (and refuses to take one itself), and its retention
never deletes a commitlog file its master still has, whatever its own thresholds say: it deletes a file
once the master did. What each side holds is read from the files by an independent reader."""

from __future__ import annotations

import json
import os
import time

import pytest
from broker.test_admin import scrape
from servers import wait_until

from spark_mq.common.errors import MQClientError
from spark_mq.remoting.codes import ResponseCode

from .commitlog_files import read_commitlog
from .test_replication import QUEUES, make_topic, send_batches

SYNC_INTERVAL_MS = 500  # the slave's slaveSynchronizeInterval in these tests
TIMEOUT_S = 30.0
ALL_HOURS = ";".join(str(h) for h in range(24))  # deleteWhen: retention may delete at any hour
# the master keeps a commitlog file an hour after its last write: here until the test ages it
MASTER_RETENTION = f"fileReservedTime=1\ndeleteWhen={ALL_HOURS}\ncleanResourceInterval=200\n"
# the slave's own rule would delete every full file at once
SLAVE_RETENTION = (f"fileReservedTime=0\ndeleteWhen={ALL_HOURS}\ncleanResourceInterval=200\n"
                   f"slaveSynchronizeInterval={SYNC_INTERVAL_MS}\n")
KEPT_FOR_MASTER = ("spark_mq_retention_kept_for_master_total", ())  # the slave's runs that kept files for the master


def _tiered_offset(api, addr: str, topic: str, queue_id: int) -> int | None:
    try:
        return api.query_tiered_offset(addr, topic, queue_id).offset
    except MQClientError:  # the slave has not copied the topic yet
        return None


def test_a_watermark_set_on_the_master_appears_on_the_slave(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", slave_conf=f"slaveSynchronizeInterval={SYNC_INTERVAL_MS}\n")
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, 2 * QUEUES, seed=11)  # 32 messages a queue
    api.update_tiered_offset(pair.master.addr, topic, 1, 20)
    wait_until(lambda: _tiered_offset(api, pair.slave.addr, topic, 1) == 20, TIMEOUT_S,
               "the master's watermark on the slave")
    saved = json.loads((pair.slave.store / "config" / "tieredOffset.json").read_text())
    assert saved["offsetTable"][topic] == {"1": 20}

    # it follows the master as it moves; the slave takes none itself (its next sync would undo it)
    api.update_tiered_offset(pair.master.addr, topic, 1, 32)
    with pytest.raises(MQClientError) as refused:
        api.update_tiered_offset(pair.slave.addr, topic, 2, 10)
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE and pair.master.addr in refused.value.remark
    wait_until(lambda: _tiered_offset(api, pair.slave.addr, topic, 1) == 32, TIMEOUT_S,
               "the master's moved watermark on the slave")
    assert _tiered_offset(api, pair.slave.addr, topic, 2) == 0


def _file_starts(broker) -> set[int]:
    """The start offsets of the broker's commitlog files (their names), without reading them."""
    return {int(name) for name in os.listdir(broker.store / "commitlog")}


def _age(path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


def test_a_slave_with_a_shorter_retention_keeps_everything_its_master_has(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", metrics=True, master_conf=MASTER_RETENTION, slave_conf=SLAVE_RETENTION)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, 24, seed=12)  # ~300 KB: several 64 KiB files

    def end(broker) -> int:
        return int(api.get_broker_runtime_info(broker.addr)["commitLogMaxOffset"])
    wait_until(lambda: end(pair.slave) == end(pair.master), TIMEOUT_S, "the slave to copy the master's commitlog")
    master = read_commitlog(pair.master.store)  # nothing is written any more: the files hold still
    assert len(master.files) >= 4
    # the slave's retention runs every 200 ms and would delete every full file; its master has them all

    def kept() -> bool:
        assert _file_starts(pair.slave) == set(master.files), "the slave deleted files its master has"
        return scrape(pair.slave.metrics_url).get(KEPT_FOR_MASTER, 0) > 0
    wait_until(kept, TIMEOUT_S, "the slave's retention to keep its files")
    slave = read_commitlog(pair.slave.store)
    assert slave.files.keys() == master.files.keys()
    assert slave.span(0, master.end) == master.span(0, master.end)

    # the master's two oldest files expire and go: the slave follows, and keeps the rest
    oldest = sorted(master.files)[:2]
    gone_from = sorted(master.files)[2]

    def master_deleted():
        for start in oldest:  # aged again each time: a late flush of the file may have touched it
            path = pair.master.store / "commitlog" / f"{start:020d}"
            if path.exists():
                _age(path, 2)
        return min(_file_starts(pair.master)) == gone_from
    wait_until(master_deleted, TIMEOUT_S, "the master to delete its two oldest files")
    wait_until(lambda: min(_file_starts(pair.slave)) == gone_from, TIMEOUT_S,
               "the slave to delete the files its master deleted")
    master, slave = read_commitlog(pair.master.store), read_commitlog(pair.slave.store)
    assert slave.files.keys() == master.files.keys()
    assert slave.end == master.end and slave.span(gone_from, master.end) == master.span(gone_from, master.end)
    for q in range(QUEUES):  # what a reader moving to the slave sees
        assert api.get_min_offset(pair.slave.addr, topic, q) == api.get_min_offset(pair.master.addr, topic, q)
