"""The NameServer process: route registry + request handlers on a RemotingServer + eviction scan, and
with ``enableControllerInNamesrv`` the replication controller's handlers on the same server.

``serve`` runs one until SIGTERM/SIGINT: it stops accepting, closes every connection and
returns, so a supervisor's stop is a clean exit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from spark_mq.acl.gate import AclGate
from spark_mq.common.config import ControllerConfig, NamesrvConfig
from spark_mq.common.errors import RemotingConnectError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.common.serve_until_signal import run_server, serve_until_signal
from spark_mq.common.tls import server_context
from spark_mq.controller.manager import ControllerManager
from spark_mq.controller.server import open_state_store
from spark_mq.namesrv.kv_config import KVConfigManager
from spark_mq.namesrv.processor import NamesrvProcessor
from spark_mq.namesrv.route_info import RouteInfoManager
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.loop import every, stop_tasks
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


class NamesrvController:
    """Owns the NameServer's parts; ``start``/``stop`` run on one event loop."""

    def __init__(self, config: NamesrvConfig, clock: Callable[[], float] = time.time,
                 controller_config: ControllerConfig | None = None) -> None:
        self.config = config
        self.routes = RouteInfoManager(clock, config.broker_channel_expired_time / 1000, on_evict=self._close_evicted)
        self.kv = KVConfigManager(JsonConfigFile(Path(config.kv_config_path)) if config.kv_config_path else None)
        self.gate = AclGate.of(config)
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="namesrv", gate=self.gate,
                                     ssl_context=server_context(config), tls_mode=config.tls_server_mode)
        NamesrvProcessor(self.routes, self.kv, config).register_on(self.server)
        self.server.on_connect(lambda conn: conn.on_close(self.routes.on_connection_closed))
        self.replication: ControllerManager | None = None
        if controller_config is not None:  # RocketMQ's enableControllerInNamesrv
            self.replication = ControllerManager(controller_config, open_state_store(controller_config))
            self.replication.register_on(self.server)
        self._tasks: list[asyncio.Task] = []

    @property
    def address(self) -> str:
        return f"{self.config.listen_address}:{self.server.port}"

    async def start(self) -> int:
        """Listen and start the eviction scan; returns the bound port."""
        port = await self.server.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(
            every(self.config.scan_not_active_broker_interval / 1000, self.routes.scan_not_active_brokers,
                  "scan of inactive brokers"), name="namesrv-scan"))
        if self.gate is not None:
            self._tasks.append(loop.create_task(self.gate.run(), name="namesrv-acl"))
        if self.replication is not None:
            await self.replication.start(self.address)
        return port

    async def stop(self) -> None:
        if self.replication is not None:
            await self.replication.stop()
        await stop_tasks(self._tasks)
        await self.server.stop()

    @staticmethod
    def _close_evicted(addr: str, conn: object | None) -> None:
        if isinstance(conn, Connection):
            conn.close(RemotingConnectError(f"broker {addr} evicted: no heartbeat within the expiry"))


async def serve(config: NamesrvConfig, on_ready: Callable[[str], None] | None = None,
                controller_config: ControllerConfig | None = None) -> None:
    """Run a NameServer (with an embedded controller if ``controller_config``) until SIGTERM or SIGINT."""
    controller = NamesrvController(config, controller_config=controller_config)
    await serve_until_signal(lambda stop: run_server(controller, stop, on_ready))
    log.info("namesrv stopped on signal")
