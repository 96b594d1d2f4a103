"""What ``spark-mq broker`` imports before it serves: a broker's restart time is mostly
imports, so modules only other commands or an enabled option need stay out of its path."""

from __future__ import annotations

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
                        "spark_mq.broker.processors.send:SendOutcome")
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
