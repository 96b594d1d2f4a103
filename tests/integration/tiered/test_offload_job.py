"""``jobs/offload.py`` end to end against a real broker: what it archives (read back with deltalake and
with pyarrow) is exactly the produced set, re-runs add nothing, incremental runs leave no seam, the
default boundary stops at the cold offset, and bad arguments fail with one line saying what to do."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from servers import free_addr

from spark_mq.tiered.archive import FORMATS, open_archive, parse_range_file_name

from ._support import (
    QUEUES,
    broker_rows,
    check_produced,
    create_topic,
    deltalake_rows,
    produce,
    pyarrow_rows,
    run_job,
    watermarks,
)


def archive_files(root, topic) -> list[str]:
    return sorted(open_archive(str(root), topic).data_files())


@pytest.mark.parametrize("fmt", FORMATS)
def test_offload_all_archives_the_produced_set_once(tiered_cluster, api, tmp_path, fmt):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, f"offload_all_{fmt}")
    sent = produce(c.namesrv, topic, 240)
    proc = run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path), "--format", fmt, "--all")
    assert f"240 message(s) to archive into {fmt} table" in proc.stdout
    assert proc.stdout.count("[offload] committed ") == QUEUES and "done: 240 message(s)" in proc.stdout

    expected = broker_rows(c.addr, c.broker.name, topic)  # every column as the broker serves it
    check_produced(expected, sent)
    archived = pyarrow_rows(tmp_path, topic)
    assert archived.equals(expected)
    if fmt == "delta":
        assert deltalake_rows(tmp_path, topic).equals(expected)
    else:  # one file per queue, named by its offset range, rows sorted by offset
        for f in archive_files(tmp_path, topic):
            start, end = parse_range_file_name(f.rsplit("/", 1)[1])
            assert pq.read_table(f).column("queue_offset").to_pylist() == list(range(start, end))
    maxima = {q: api.get_max_offset(c.addr, topic, q) for q in range(QUEUES)}
    assert watermarks(api, c.addr, topic) == maxima

    # a re-run finds everything archived: no commit, no new file, same rows
    files = archive_files(tmp_path, topic)
    version = DeltaTable(str(tmp_path / topic)).version() if fmt == "delta" else None
    again = run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path), "--all")
    assert "0 message(s) to archive" in again.stdout and "[offload] committed" not in again.stdout
    assert archive_files(tmp_path, topic) == files
    if fmt == "delta":
        assert DeltaTable(str(tmp_path / topic)).version() == version
    assert pyarrow_rows(tmp_path, topic).equals(expected)


def test_default_boundary_then_incremental_runs_leave_no_seam(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, "offload_incremental")
    sent = produce(c.namesrv, topic, 400)  # ~200 KiB: several 64 KiB commitlog files

    # default: only what lies in full commitlog files, i.e. up to each queue's cold offset
    run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path))
    cold = {q: api.query_tiered_offset(c.addr, topic, q).cold_offset for q in range(QUEUES)}
    maxima = {q: api.get_max_offset(c.addr, topic, q) for q in range(QUEUES)}
    assert all(0 < cold[q] < maxima[q] for q in range(QUEUES)), (cold, maxima)
    assert watermarks(api, c.addr, topic) == cold
    archive = open_archive(str(tmp_path), topic)
    assert {q: archive.archived_end(c.broker.name, q) for q in range(QUEUES)} == cold
    assert deltalake_rows(tmp_path, topic).equals(broker_rows(c.addr, c.broker.name, topic, cold))

    # then everything, then more messages and everything again: two seams per queue
    run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path), "--all")
    sent += produce(c.namesrv, topic, 120, first=400)
    run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path), "--all")
    expected = broker_rows(c.addr, c.broker.name, topic)
    check_produced(expected, sent)
    assert deltalake_rows(tmp_path, topic).equals(expected)
    assert pyarrow_rows(tmp_path, topic).equals(expected)
    assert len(archive.data_files()) == 3 * QUEUES


def test_bad_arguments_fail_with_what_to_do(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    root = str(tmp_path)
    proc = run_job("--namesrv", c.namesrv, "--topic", "NoSuchTopic", "--root", root, ok=False)
    assert proc.returncode == 2 and "topic 'NoSuchTopic' is not known to the NameServer" in proc.stderr
    proc = run_job("--namesrv", free_addr(), "--topic", "T", "--root", root, ok=False)
    assert proc.returncode == 2 and "cannot reach any NameServer" in proc.stderr
    proc = run_job("--namesrv", c.namesrv, "--topic", "T", "--root", root, "--older-than", "5 parsecs", ok=False)
    assert proc.returncode == 2 and "is not a duration: write a number with a unit" in proc.stderr
    proc = run_job("--namesrv", c.namesrv, "--topic", "T", "--root", root, "--older-than", "1h", "--all", ok=False)
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    proc = run_job("--namesrv", c.namesrv, "--root", root, ok=False)
    assert proc.returncode == 2 and "--topic" in proc.stderr

    topic = create_topic(api, c.namesrv, c.addr, "offload_format")
    produce(c.namesrv, topic, 8)
    run_job("--namesrv", c.namesrv, "--topic", topic, "--root", root, "--format", "parquet", "--all")
    proc = run_job("--namesrv", c.namesrv, "--topic", topic, "--root", root, "--format", "delta", ok=False)
    assert proc.returncode == 2 and "is a parquet table, not delta: pass --format parquet" in proc.stderr
    assert proc.stdout == ""  # nothing planned, nothing written


def test_several_topics_in_one_run(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    topics = [create_topic(api, c.namesrv, c.addr, "offload_many") for _ in range(2)]
    sent = {t: produce(c.namesrv, t, 16) for t in topics}
    proc = run_job("--namesrv", c.namesrv, "--topic", ",".join(topics), "--root", str(tmp_path), "--all")
    assert "done: 32 message(s)" in proc.stdout
    for t in topics:
        check_produced(deltalake_rows(tmp_path, t), sent[t])
