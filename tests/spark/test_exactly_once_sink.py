"""The exactly-once ``spark_mq`` sink (``exactlyOnce=true``, issue 16) against real processes: a driver
of its own (``eo_driver.py``: local[2], the deterministic ``rate-micro-batch`` source) SIGKILLed with
its whole process tree (JVM, PySpark's daemon and Python workers, which leave its process group) while
it writes, restarted from its checkpoint each time; the broker SIGKILLed once. Afterwards a fresh
read of the topic holds every row exactly once. A fresh query's driver is listed by the broker as a
producer of the sink's group from before its first half message until its first commit (check-backs
reach it during start-up).

The commit protocol's crash points are also driven one by one without Spark (the executor and driver
functions of ``spark_mq.spark.sink`` / ``exactly_once`` on Arrow batches): after the half messages,
after the decision before any END_TRANSACTION, and after the commit before Spark's checkpoint.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from process_tree import Proc, kill_tree, survivors
from pyspark.sql.types import StringType, StructField, StructType
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.client.transaction_producer import LocalTransactionState
from spark_mq.common.errors import ConfigError
from spark_mq.remoting.bodies import ProducerConnection
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import PullMessageRequestHeader
from spark_mq.spark import exactly_once, sink
from spark_mq.spark.options import DEFAULT_PRODUCER_GROUP, SinkOptions

DRIVER = Path(__file__).resolve().parent / "eo_driver.py"
QUEUES = 4
# check-back soon after a crash; many checks (a discard would be configuration, not the sink's doing)
TX_CONF = "transactionTimeOut=2000\ntransactionCheckInterval=500\ntransactionCheckMax=1000\n"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


@pytest.fixture
def eo_cluster(tmp_path):
    """A NameServer and one broker of their own (the broker is SIGKILLed by some tests)."""
    ns = start_namesrv(tmp_path / "namesrv.log", verbose=False)
    b = Broker(ns.addr, tmp_path / "broker", TX_CONF, broker_name=unique("eo"), verbose=False)
    yield ns.addr, b
    b.stop_if_running()
    ns.stop_cleanly()


def make_topic(namesrv: str, b: Broker) -> str:
    topic = unique("EoSink")
    with SyncMQClientAPI() as api:
        api.create_topic(b.addr, topic, QUEUES, QUEUES)
        wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    return topic


def read_all(addr: str, topic: str) -> list[bytes]:
    """Every message of ``topic`` a fresh consumer reads (each queue from offset 0)."""
    out: list[bytes] = []
    with SyncMQClientAPI(timeout=30) as api:
        for q in range(QUEUES):
            offset = 0
            while True:
                r = api.pull_message(addr, PullMessageRequestHeader(
                    consumer_group=unique("eo_reader"), topic=topic, queue_id=q, queue_offset=offset,
                    max_msg_nums=4096, sys_flag=0, commit_offset=0, suspend_timeout_millis=0,
                    sub_version=0), timeout=30)
                if r.status != PullStatus.FOUND:
                    break
                out.extend(m.body for m in r.messages())
                offset = r.next_begin_offset
    return out


def assert_exactly_once(got: list[bytes], rows: int) -> None:
    counts = Counter(got)
    duplicates = {body: n for body, n in counts.items() if n > 1}
    expected = {f"row-{i}".encode() for i in range(rows)}
    lost, extra = expected - set(counts), set(counts) - expected
    assert not lost and not extra and not duplicates, (
        f"{len(lost)} lost, {len(extra)} unexpected, {len(duplicates)} duplicated "
        f"(e.g. {sorted(lost)[:3]} {sorted(extra)[:3]} {list(duplicates.items())[:3]})")
    assert len(got) == rows


# -- the protocol, crash point by crash point (no Spark) --------------------------------------------
class _Task:
    """What TaskContext.get() gives a streaming write task: its local properties."""

    def __init__(self, query_id: str, batch_id: int) -> None:
        self.props = {exactly_once.QUERY_ID_KEY: query_id, exactly_once.BATCH_ID_KEY: str(batch_id)}

    def getLocalProperty(self, key: str) -> str | None:
        return self.props.get(key)


class AnswerLog(exactly_once.SinkChecker):
    """The sink's checker, remembering its answers per writer."""

    answers: dict[str, LocalTransactionState] = {}

    def answer(self, msg):
        state = super().answer(msg)
        AnswerLog.answers[msg.properties["__transactionId__"]] = state
        return state


def write_task(opts: SinkOptions, query_id: str, batch_id: int, values: range) -> sink.SinkCommitMessage:
    """One write task of micro-batch ``batch_id``: the executor's code on an Arrow batch of ``values``."""
    tx, extra = exactly_once.start_writer(opts, _Task(query_id, batch_id))
    batch = pa.RecordBatch.from_pydict({"body": [f"row-{v}" for v in values]})
    with SyncMQClientAPI(timeout=10) as api:
        sender = sink._Sender(api, opts, 0, tx)
        sender.send(sink.encode_rows(batch, opts.topic, extra))
    return sender.result


def test_exactly_once_needs_a_stream_and_one_topic():
    with pytest.raises(ConfigError, match="needs the 'topic' option"):
        SinkOptions.parse({"namesrv": "127.0.0.1:9876", "exactlyOnce": "true"})
    with pytest.raises(ConfigError, match="must be true or false"):
        SinkOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "exactlyOnce": "yes"})
    opts = SinkOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "exactlyonce": "TRUE"})
    assert opts.exactly_once
    with pytest.raises(ConfigError, match="applies to writeStream"):
        sink.make_writer({"namesrv": "127.0.0.1:9876", "topic": "t", "exactlyOnce": "true"},
                         StructType([StructField("body", StringType())]), False, streaming=False)


def test_every_crash_point_of_a_commit_keeps_each_row_once(eo_cluster):
    """Batch 0: half messages written, then the driver "crashes" (nothing resolved): invisible; the
    replay decides with its own writers and the crashed attempt's are answered ROLLBACK. Batch 1: the
    decision written, the crash before any END: the replay rolls the old attempt forward and its own
    back. Batch 2: committed, the crash before Spark's checkpoint: the replay changes nothing."""
    namesrv, b = eo_cluster
    topic = make_topic(namesrv, b)
    opts = SinkOptions.parse({"namesrv": namesrv, "topic": topic, "exactlyOnce": "true"})
    query = unique("query")
    tx = lambda m: m.transaction  # noqa: E731

    # batch 0: crash after the half messages
    crashed = [write_task(opts, query, 0, range(0, 50)), write_task(opts, query, 0, range(50, 100))]
    assert read_all(b.addr, topic) == []
    replay = [write_task(opts, query, 0, range(0, 50)), write_task(opts, query, 0, range(50, 100))]
    done = exactly_once.resolve(opts, [tx(m) for m in replay], 0, write_decision=True)
    assert not done.replayed and done.committed_writers == 2
    assert_exactly_once(read_all(b.addr, topic), 100)
    with SyncMQClientAPI() as api:
        addr, _ = exactly_once.coordinator(api, opts)
        decision = exactly_once.find_decision(api, addr, query, 0)
    assert {exactly_once.check_answer(decision, tx(m).writer) for m in crashed} == {
        LocalTransactionState.ROLLBACK_MESSAGE}
    assert {exactly_once.check_answer(decision, tx(m).writer) for m in replay} == {
        LocalTransactionState.COMMIT_MESSAGE}
    assert exactly_once.check_answer(None, "w") == LocalTransactionState.UNKNOW
    # the crashed attempt's half messages are checked back: the driver's checker answers ROLLBACK
    try:
        AnswerLog.ensure(opts)
        wait_until(lambda: {tx(m).writer for m in crashed} <= set(AnswerLog.answers), timeout=60,
                   what="check-back of the crashed attempt's writers")
    finally:
        exactly_once.SinkChecker.stop_all()
    assert {AnswerLog.answers[tx(m).writer] for m in crashed} == {LocalTransactionState.ROLLBACK_MESSAGE}
    assert_exactly_once(read_all(b.addr, topic), 100)

    # batch 1: crash after the decision, before any END_TRANSACTION
    first = [write_task(opts, query, 1, range(100, 150)), write_task(opts, query, 1, range(150, 200))]
    proposal = exactly_once.Decision(query, 1, {tx(m).writer: dict(tx(m).handles) for m in first})
    with SyncMQClientAPI() as api:
        assert exactly_once.decide(api, addr, proposal, opts.producer_group) == proposal
    assert len(read_all(b.addr, topic)) == 100  # decided, not yet committed: invisible
    replay = [write_task(opts, query, 1, range(100, 150)), write_task(opts, query, 1, range(150, 200))]
    done = exactly_once.resolve(opts, [tx(m) for m in replay], 1, write_decision=True)
    assert done.replayed and done.committed_writers == 2 and done.rolled_back_writers == 2
    assert_exactly_once(read_all(b.addr, topic), 200)

    # batch 2: committed, then the crash before Spark's checkpoint recorded it
    first = [write_task(opts, query, 2, range(200, 300))]
    exactly_once.resolve(opts, [tx(m) for m in first], 2, write_decision=True)
    replay = [write_task(opts, query, 2, range(200, 300))]
    done = exactly_once.resolve(opts, [tx(m) for m in replay], 2, write_decision=True)
    assert done.replayed and done.rolled_back_writers == 1
    # an abort of a batch an earlier attempt committed keeps that attempt's rows
    again = [write_task(opts, query, 2, range(200, 300))]
    exactly_once.resolve(opts, [tx(m) for m in again], 2, write_decision=False)
    assert_exactly_once(read_all(b.addr, topic), 300)


# -- a real driver, SIGKILLed ----------------------------------------------------------------------
class Driver:
    """``eo_driver.py`` in a session of its own; :meth:`kill` kills everything it started."""

    def __init__(self, namesrv: str, topic: str, checkpoint: Path, rows: int, per_batch: int, log: Path) -> None:
        self.log_path = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), "--namesrv", namesrv, "--topic", topic, "--checkpoint",
                 str(checkpoint), "--rows", str(rows), "--rows-per-batch", str(per_batch)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ})

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> set[Proc]:
        """SIGKILL the driver's whole process tree (python, JVM, PySpark's daemon and workers, which
        leave the driver's process group); returns the processes killed."""
        killed = kill_tree(self.proc.pid)
        self.proc.wait(30)
        return killed


def committed_batches(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def producer_count(admin: SyncRemotingClient, addr: str, group: str) -> int:
    """How many producers of ``group`` the broker lists (GET_PRODUCER_CONNECTION_LIST)."""
    r = admin.invoke(addr, RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}))
    return len(ProducerConnection.from_json(r.body).connection_set) if r.code == ResponseCode.SUCCESS else 0


def assert_announced_before_first_commit(driver: Driver, checkpoint: Path, addr: str) -> None:
    """Watch a fresh query until its first commit: the driver's check-back answerer starts with the
    query (when Spark plans the sink), not at the first commit, so the broker lists the sink's producer
    group before the first half message is stored and keeps listing it until the first commit (check
    rounds meanwhile, e.g. about a restarted query's leftover half messages, reach it instead of
    counting toward transactionCheckMax)."""
    polls: list[tuple[int, int]] = []  # (producers listed, half messages stored), every 50 ms
    deadline = time.monotonic() + 300
    with SyncRemotingClient() as admin, SyncMQClientAPI() as api:
        while committed_batches(checkpoint) == 0:
            assert driver.proc.poll() is None and time.monotonic() < deadline, driver.output()[-4000:]
            polls.append((producer_count(admin, addr, DEFAULT_PRODUCER_GROUP),
                          api.get_max_offset(addr, HALF_TOPIC, 0) or 0))
            time.sleep(0.05)
    announced = next((i for i, (n, _) in enumerate(polls) if n), None)
    assert announced is not None, "the sink's producer group was never listed before the first commit"
    assert polls[announced][1] == 0, f"announced only after {polls[announced][1]} half messages were stored"
    assert all(n for n, _ in polls[announced:]), "the sink's producer went away before the first commit"


def run_with_kills(namesrv: str, b: Broker, tmp_path: Path, rows: int, per_batch: int, driver_kills: int,
                   broker_kill: bool, seed: int) -> dict[str, object]:
    """Run the query to its end while its driver is SIGKILLed ``driver_kills`` times (a random pause
    after the run committed a batch of its own and the planned number in all; every process of its
    tree checked gone) and, with ``broker_kill``, the broker once mid-run; returns what happened. The
    first run's start is watched too (:func:`assert_announced_before_first_commit`)."""
    rng = random.Random(seed)
    topic = make_topic(namesrv, b)
    checkpoint = tmp_path / "ckpt"
    batches = rows // per_batch
    kill_after = sorted(rng.sample(range(1, batches), driver_kills + (1 if broker_kill else 0)))
    events: list[str] = []
    tree_sizes: list[int] = []  # processes per killed driver
    runs = 0
    started = time.monotonic()
    driver = Driver(namesrv, topic, checkpoint, rows, per_batch, tmp_path / f"driver-{runs}.log")
    assert_announced_before_first_commit(driver, checkpoint, b.addr)
    for i, after in enumerate(kill_after):
        # past the planned batch, and at least one batch past where this run started: every run gets going
        target = max(after, committed_batches(checkpoint) + 1)
        wait_until(lambda t=target, d=driver: committed_batches(checkpoint) >= t or d.proc.poll() is not None,
                   timeout=300, what=f"{target} committed batches")
        if broker_kill and i == len(kill_after) // 2:
            b.kill()
            events.append(f"broker SIGKILL after {committed_batches(checkpoint)} batches")
            time.sleep(rng.uniform(0, 2))  # the driver keeps trying meanwhile
            b.start_again()
            continue
        time.sleep(rng.uniform(0, 1.5))  # anywhere in a micro-batch: writing, deciding, ending, checkpointing
        events.append(f"driver SIGKILL after {committed_batches(checkpoint)} batches")
        killed = driver.kill()
        assert not survivors(killed), f"processes of the killed driver still run: {sorted(survivors(killed))}"
        tree_sizes.append(len(killed))
        runs += 1
        driver = Driver(namesrv, topic, checkpoint, rows, per_batch, tmp_path / f"driver-{runs}.log")
    while True:  # a driver that failed (the broker was down too long for a task) is restarted too
        wait_until(lambda d=driver: d.proc.poll() is not None, timeout=600, what="the query's end")
        if "[eo] DONE" in driver.output():
            break
        assert runs < driver_kills + 5, f"the driver keeps failing:\n{driver.output()[-4000:]}"
        failure = [line for line in driver.output().splitlines() if line.startswith("[eo] FAILED")]
        events.append(f"driver exited {driver.proc.returncode} ({failure[-1][:200] if failure else '?'}): restarted")
        runs += 1
        driver = Driver(namesrv, topic, checkpoint, rows, per_batch, tmp_path / f"driver-{runs}.log")
    elapsed = time.monotonic() - started
    got = read_all(b.addr, topic)
    replays = sum((tmp_path / f"driver-{r}.log").read_text(errors="replace").count("committed by an earlier attempt")
                  for r in range(runs + 1))
    return {"topic": topic, "got": got, "events": events, "runs": runs + 1, "elapsed_s": round(elapsed, 1),
            "replays_recognised": replays, "killed_tree_sizes": tree_sizes}


def test_driver_sigkilled_twice_and_broker_once_writes_each_row_once(eo_cluster, tmp_path):
    """CI-sized: both kinds of kill in one run (a driver start each is what costs here): the driver SIGKILLed, the
    broker SIGKILLed mid-run while the restarted driver keeps trying, the driver SIGKILLed again."""
    namesrv, b = eo_cluster
    figures = run_with_kills(namesrv, b, tmp_path, rows=3_000, per_batch=500, driver_kills=2, broker_kill=True,
                             seed=16)
    assert_exactly_once(figures.pop("got"), 3_000)
    assert sum(e.startswith("broker SIGKILL") for e in figures["events"]) == 1, figures
    assert sum(e.startswith("driver SIGKILL") for e in figures["events"]) == 2, figures
    print("exactly-once sink, driver SIGKILL x2 + broker SIGKILL x1:", figures)


@pytest.mark.slow
def test_100k_rows_driver_sigkilled_three_times_and_broker_once(eo_cluster, tmp_path):
    namesrv, b = eo_cluster
    figures = run_with_kills(namesrv, b, tmp_path, rows=100_000, per_batch=5_000, driver_kills=3, broker_kill=True,
                             seed=100)
    assert_exactly_once(figures.pop("got"), 100_000)
    print("exactly-once sink, 100k rows, driver SIGKILL x3 + broker SIGKILL x1:", figures)
