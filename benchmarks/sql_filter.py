"""SQL92 filtering on the broker: messages filtered per second, as a ratio of an unfiltered pull.

Starts a NameServer and a broker (``enablePropertyFilter=true``) as processes, sends ``--messages``
messages with properties ``a`` (0..99), ``b`` (a colour) and TAGS to one queue (not timed), then
drains the queue from offset 0 with PULL_MESSAGE (``--pull`` messages per pull) three ways:

  unfiltered   subscription "*"
  sql92        the 3-clause expression ``a >= 10 AND a < 60 AND b IN ('red', 'blue')`` (about 20%
               of the messages match)

and reports messages *scanned* per second (the whole backlog over the drain's seconds) for each,
and the ratio sql92 / unfiltered (each drain runs once untimed first); also per CPU-second of the
broker process, the steadier figure on a shared machine. The broker judges every
candidate unit in one vectorised pass per pull, so the ratio is the cost of reading properties as
columns and evaluating the tree over them.

    .venv/bin/python benchmarks/sql_filter.py [--messages 200000] [--pull 1024] [--quick]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from _common import (
    BROKER_READY,
    NAMESRV_READY,
    Server,
    Timer,
    code_version,
    dump_json,
    machine_line,
    parser,
    print_table,
    process_tree_cpu,
    rate,
    scratch_dir,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message, MessageBatch
from spark_mq.remoting.bodies import EXPRESSION_SQL92, EXPRESSION_TAG
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag

TOPIC = "BenchSql92"
GROUP = "bench_sql92"
EXPRESSION = "a >= 10 AND a < 60 AND b IN ('red', 'blue')"
COLOURS = ("red", "green", "blue", "grey", "black")
BATCH = 256


def fill(api: SyncMQClientAPI, broker: str, messages: int) -> int:
    sent = 0
    while sent < messages:
        n = min(BATCH, messages - sent)
        batch = MessageBatch.from_messages(
            [Message(TOPIC, b"x" * 100, tags=f"t{i % 3}", properties={"a": str(i % 100), "b": COLOURS[i % 5]})
             for i in range(sent, sent + n)], 0)
        api.send_batch(broker, batch, "bench_producer")
        sent += n
    return sent


def broker_cpu_s(pid: int) -> float:
    """The broker process's CPU seconds so far (user + system)."""
    return process_tree_cpu(pid)[pid][1]


def drain(api: SyncMQClientAPI, broker: str, end: int, pull: int, expression: str, expression_type: str,
          pid: int) -> dict:
    header = PullMessageRequestHeader(
        consumer_group=GROUP, topic=TOPIC, queue_id=0, queue_offset=0, max_msg_nums=pull,
        sys_flag=build_pull_sys_flag(commit_offset=False, suspend=False, subscription=True),
        commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=expression,
        expression_type=expression_type)
    offset = found = pulls = 0
    cpu0 = broker_cpu_s(pid)
    with Timer() as t:
        while offset < end:
            result = api.pull_message(broker, dataclasses.replace(header, queue_offset=offset))
            found += len(result.unit_starts()) if result.body else 0
            offset = result.next_begin_offset
            pulls += 1
    cpu = broker_cpu_s(pid) - cpu0
    return {"found": found, "pulls": pulls, "seconds": t.seconds, "scanned_msg_s": rate(end, t.seconds),
            "broker_cpu_s": cpu, "scanned_msg_per_broker_cpu_s": rate(end, cpu)}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000, help="backlog size")
    p.add_argument("--pull", type=int, default=1024, help="max messages per pull")
    a = p.parse_args()
    if a.quick:
        a.messages = 20_000
    with scratch_dir(a.dir, "bench-sql92-") as root:
        conf = root / "broker.conf"
        conf.write_text("enablePropertyFilter=true\n")
        namesrv = Server(["namesrv", "--port", "0"], root / "namesrv.log", NAMESRV_READY)
        try:
            broker = Server(["broker", "-c", str(conf), "--namesrv", namesrv.addr, "--port", "0", "--store",
                             str(root / "store")], root / "broker.log", BROKER_READY)
            try:
                with SyncMQClientAPI(timeout=30) as api:
                    api.create_topic(broker.addr, TOPIC, 1, 1)
                    end = fill(api, broker.addr, a.messages)
                    # each drain once untimed first: the page cache, and Arrow's one-time start in the broker
                    pid = broker.proc.pid
                    plain = [drain(api, broker.addr, end, a.pull, "*", EXPRESSION_TAG, pid) for _ in range(2)][-1]
                    sql = [drain(api, broker.addr, end, a.pull, EXPRESSION, EXPRESSION_SQL92, pid)
                           for _ in range(2)][-1]
            finally:
                broker.stop()
        finally:
            namesrv.stop()
    expected = sum(1 for i in range(end) if 10 <= i % 100 < 60 and COLOURS[i % 5] in ("red", "blue"))
    assert plain["found"] == end and sql["found"] == expected, (plain, sql, expected)
    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    per_cpu = "scanned_msg_per_broker_cpu_s"
    rows = [["unfiltered", plain["found"], plain["pulls"], plain["scanned_msg_s"], 1.0, plain[per_cpu], 1.0],
            ["sql92 (3 clauses)", sql["found"], sql["pulls"], sql["scanned_msg_s"],
             sql["scanned_msg_s"] / plain["scanned_msg_s"], sql[per_cpu], sql[per_cpu] / plain[per_cpu]]]
    print_table(f"draining {end:,} messages from one queue, {a.pull} per pull (real broker)",
                ("subscription", "delivered", "pulls", "scanned msg/s", "/ unfiltered", "per broker CPU-s",
                 "/ unfiltered"), rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "unfiltered": plain, "sql92": sql})


if __name__ == "__main__":
    main()
