"""The controller process (``spark-mq controller``): a ControllerManager on a RemotingServer of its own.

``serve`` runs one until SIGTERM/SIGINT, then leaves the election, closes every connection and returns.
``open_state_store`` is the one place that turns ``controllerType`` into a state store, for this process
and for the controller embedded in the NameServer (which config loading keeps to ``file``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from spark_mq.acl.gate import AclGate
from spark_mq.common.config import CONTROLLER_TYPE_ZOOKEEPER, ControllerConfig
from spark_mq.common.serve_until_signal import run_server, serve_until_signal
from spark_mq.common.tls import server_context
from spark_mq.controller.file_state_store import FileStateStore
from spark_mq.controller.manager import ControllerManager
from spark_mq.controller.state_store import ControllerStateStore
from spark_mq.remoting.loop import stop_tasks
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

STATE_FILE = "state.json"  # controllerType=file: the records' file in controllerStorePath


def open_state_store(config: ControllerConfig) -> ControllerStateStore:
    """The store the controller's decisions and leadership live in; raises StateStoreError when it
    cannot be reached or (``file``) another process holds it."""
    if config.controller_type == CONTROLLER_TYPE_ZOOKEEPER:
        # lazy import: kazoo (ZooKeeper's client, ~10 ms of a start) only for controllerType=zookeeper
        from spark_mq.controller.zookeeper_state_store import ZooKeeperStateStore

        return ZooKeeperStateStore(config.zookeeper_connect_string, config.zookeeper_root_path,
                                   config.zookeeper_session_timeout_mills / 1000)
    return FileStateStore(Path(config.controller_store_path) / STATE_FILE)


class ControllerServer:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.gate = AclGate.of(config)
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="controller",
                                     gate=self.gate, ssl_context=server_context(config),
                                     tls_mode=config.tls_server_mode)
        self.manager = ControllerManager(config, open_state_store(config))
        self.manager.register_on(self.server)
        self._tasks: list[asyncio.Task] = []

    @property
    def address(self) -> str:
        return f"{self.config.listen_address}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        await self.manager.start(self.address)
        if self.gate is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self.gate.run(), name="controller-acl"))

    async def stop(self) -> None:
        await stop_tasks(self._tasks)
        await self.manager.stop()
        await self.server.stop()


async def serve(config: ControllerConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a controller until SIGTERM or SIGINT."""
    controller = ControllerServer(config)
    await serve_until_signal(lambda stop: run_server(controller, stop, on_ready))
    log.info("controller stopped on signal")
