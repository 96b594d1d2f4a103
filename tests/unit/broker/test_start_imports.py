"""What ``spark-mq broker`` imports before it serves: a broker's restart time is mostly
imports, so modules only other commands or an enabled option need stay out of its path."""

from __future__ import annotations

import json
import subprocess
import sys

from fresh_imports import loaded_by

# dataclasses a broker builds only for a feature in use or after it serves: lazy, not made by importing its start path
LAZY_AT_BROKER_START = ("spark_mq.broker.pop.service:PopResult", "spark_mq.broker.pop.records:Checkpoint",
                        "spark_mq.remoting.pop_receipt:Receipt", "spark_mq.store.ha.divergence:ReplicaLog",
                        "spark_mq.broker.replication.role_change:RoleChange", "spark_mq.store.unit_walk:Chunk",
                        "spark_mq.broker.client_registry:ClientChannel", "spark_mq.store.retention:RetentionReport",
                        "spark_mq.common.config:NamesrvConfig", "spark_mq.common.config:ControllerConfig",
                        "spark_mq.common.message:Message", "spark_mq.common.message:MessageBatch",
                        "spark_mq.common.properties:PackedProperties",
                        "spark_mq.common.unit.batch:StoredBatch", "spark_mq.store.results:PutResult",
                        "spark_mq.broker.processors.send:SendOutcome",
                        # a recovery walk's result, a decoded message and a message queue: a clean restart and a
                        # plain pull make none, a crash's recovery or a client does
                        "spark_mq.common.unit.chain:WalkResult", "spark_mq.common.unit.decode:StoredMessage",
                        "spark_mq.remoting.bodies:MessageQueue")
NOT_AT_BROKER_START = ("prometheus_client", "spark_mq.commands", "spark_mq.client", "spark_mq.tiered",
                       "difflib", "rich", "pyarrow", "tempfile", "secrets",
                       # a third of a restart's instructions: the store's modules take it from common.lazy_numpy
                       "numpy",
                       # a slave's and controller mode's only: imported where those roles start them
                       "spark_mq.store.ha.ha_client", "spark_mq.broker.replication.slave_synchronize",
                       "spark_mq.broker.replication.master_commitlog", "spark_mq.broker.replication.replicas_manager",
                       "spark_mq.broker.replication.sync_state_keeper")


def test_broker_start_path_leaves_out_other_commands_and_metrics():
    code = ("from spark_mq.cli import build_parser\n"
            "args = build_parser('broker').parse_args(['broker', '--metrics-port', '0'])\n"
            "import spark_mq.broker.controller\n")
    assert loaded_by(code, NOT_AT_BROKER_START) == []


def test_broker_start_path_makes_no_dataclass_it_does_not_use_yet():
    # made: the class has its own fields (``is_dataclass`` is also true of a lazy subclass of a made dataclass)
    code = ("import importlib\n"
            "import spark_mq.broker.controller\n"
            f"names = {LAZY_AT_BROKER_START!r}\n"
            "classes = {n: getattr(importlib.import_module(n.split(':')[0]), n.split(':')[1]) for n in names}\n"
            "made = [n for n, cls in classes.items() if '__dataclass_fields__' in vars(cls)]\n"
            "print(made)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_full_parser_still_has_every_command():
    from spark_mq.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) >= {"demo", "namesrv", "broker", "dev", "produce", "consume", "admin", "query",
                                "status", "offload"}
    for command in ("demo", "namesrv", "controller", "broker", "dev"):  # a server builds its own parser only
        only = next(a for a in build_parser(command)._actions if a.dest == "command")
        assert set(only.choices) == {command}


# a broker in a fresh interpreter: "fill" sends 20 messages to queue 0 of topic T, "pull" pulls one from offset 0
# (a plain pull, as a consumer's first); each stops the broker cleanly and prints what it saw
_BROKER_RUN = """
import asyncio, json, sys, time
from spark_mq.broker.controller import BrokerController
from spark_mq.common.config import BrokerConfig
from spark_mq.remoting.codec import decode_frame, encode
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand

async def call(address, code, fields, body=b""):
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(encode(RemotingCommand.request(code, fields, body)))
    response = decode_frame(await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big")))
    writer.close()
    return response

async def main(store, phase):
    broker = BrokerController(BrokerConfig(store_path_root_dir=store, namesrv_addr="127.0.0.1:1", listen_port=0,
                                           metrics_port=0))
    await broker.start()
    try:
        if phase == "fill":
            send = {"producerGroup": "g", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                    "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                    "properties": "WAIT\\x01true\\x02"}
            seen = [(await call(broker.address, RequestCode.SEND_MESSAGE, send, b"m%d" % i)).code for i in range(20)]
        else:
            pull = {"consumerGroup": "c", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
                    "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}
            got = await call(broker.address, RequestCode.PULL_MESSAGE, pull)
            seen = {"numpy": "numpy" in sys.modules, "code": got.code, "body": b"m0" in got.body,
                    "next": got.ext_fields.get("nextBeginOffset")}
    finally:
        await broker.stop()
    print(json.dumps(seen))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _broker_run(store: str, phase: str) -> object:
    done = subprocess.run([sys.executable, "-c", _BROKER_RUN, store, phase], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_plain_master_restarted_after_a_clean_stop_serves_its_first_pull_without_numpy(tmp_path):
    """numpy is a third of a restart's instructions: a clean-stop start and a plain pull of a few messages
    (struct reads of the files, ``QueueReader._get_few``) leave it unimported."""
    store = str(tmp_path / "store")
    assert _broker_run(store, "fill") == [0] * 20
    assert _broker_run(store, "pull") == {"numpy": False, "code": 0, "body": True, "next": "1"}
