"""The embedded controller's local-file store: always leader, durable before it acknowledges, one
process per file, and a file a crash cannot tear (writer processes SIGKILLed mid-write)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys

import pytest
from servers import wait_until

from spark_mq.controller.file_state_store import FileStateStore
from spark_mq.controller.state_store import NO_RECORD, StateStoreError

# a writer process: bumps one record as fast as it can, printing each acknowledged version
WRITER = """
import sys
from spark_mq.controller.file_state_store import FileStateStore
store = FileStateStore(sys.argv[1])
value, version = store.load_all().get("broker-a", (b"", -1))
while True:
    version = store.compare_and_set("broker-a", f"decision {version + 1} ".encode() * 200, version)
    print(version, flush=True)
"""


def test_it_leads_at_once_and_keeps_its_records_across_a_restart(tmp_path):
    path = tmp_path / "controller" / "state.json"
    store = FileStateStore(path)
    told = []
    store.campaign("127.0.0.1:9876", lambda: told.append("elected"), lambda: told.append("lost"))
    assert told == ["elected"]
    assert store.leader_address() == "127.0.0.1:9876"
    store.compare_and_set("broker-a", b"master 1", NO_RECORD)
    store.compare_and_set("broker-a", b"master 2", 0)
    store.compare_and_set("broker-b", b"\x00\x01", NO_RECORD)
    store.close()

    again = FileStateStore(path)
    try:
        assert again.load_all() == {"broker-a": (b"master 2", 1), "broker-b": (b"\x00\x01", 0)}
        assert again.compare_and_set("broker-a", b"master 3", 1) == 2
    finally:
        again.close()


def test_a_second_process_cannot_open_the_same_file(tmp_path):
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    try:
        store.compare_and_set("broker-a", b"v", NO_RECORD)
        other = subprocess.run([sys.executable, "-c", WRITER, str(path)], capture_output=True, text=True, timeout=60)
        assert other.returncode != 0
        assert f"{path} is in use by another process" in other.stderr
        assert store.load_all() == {"broker-a": (b"v", 0)}
    finally:
        store.close()
    FileStateStore(path).close()  # free again once closed


def test_an_unreadable_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "state.json"
    for content in (b'{"format": 1, "records": {"broker-a": {"val', b"[1, 2]",
                    b'{"format": 1, "records": {"broker-a": {"value": "not base64!", "version": 0}}}'):
        path.write_bytes(content)
        with pytest.raises(StateStoreError, match=str(path)):
            FileStateStore(path)
        assert path.read_bytes() == content
    path.unlink()
    FileStateStore(path).close()  # the failed opens released the lock


def test_a_writer_sigkilled_mid_write_leaves_every_acknowledged_decision(tmp_path):
    """Five writer processes in turn, each SIGKILLed after a random number of acknowledged writes
    (most kills land inside a write: it rewrites a 2 KB file and fsyncs twice per decision). The file
    always parses and holds at least the last acknowledged version; the next writer goes on from it."""
    path = tmp_path / "state.json"
    rng = random.Random(15)
    acknowledged = NO_RECORD
    for run in range(5):
        out = tmp_path / f"writer{run}.out"
        with open(out, "wb") as f:
            proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=f, stderr=subprocess.STDOUT)
        want = rng.randint(5, 60)
        wait_until(lambda o=out, w=want, p=proc: len(o.read_bytes().splitlines()) >= w or p.poll() is not None, 60,
                   f"{want} acknowledged writes")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        printed = out.read_bytes().splitlines()
        acks = [int(line) for line in printed if line.strip().isdigit()]
        assert acks, out.read_text()
        assert acks[0] == acknowledged + 1  # it went on from what the file held
        acknowledged = acks[-1]

        doc = json.loads(path.read_bytes())  # never torn
        store = FileStateStore(path)
        value, version = store.load_all()["broker-a"]
        store.close()
        assert doc["records"]["broker-a"]["version"] == version
        assert version in (acknowledged, acknowledged + 1)  # + 1: written, killed before it printed
        assert value == f"decision {version} ".encode() * 200
        acknowledged = version
