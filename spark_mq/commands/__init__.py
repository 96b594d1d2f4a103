"""The client-side ``spark-mq`` commands: produce, consume, admin, query, status.

Each module adds its sub-parser; ``add_client_commands`` is all ``spark_mq.cli`` calls. Heavy
imports (the client, rich) happen when a command runs, so ``spark-mq --help`` stays fast.
"""

from __future__ import annotations

import argparse


def add_client_commands(sub: argparse._SubParsersAction) -> None:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.commands import admin, consume, produce, query, status

    for module in (produce, consume, admin, query, status):
        module.add_parser(sub)
