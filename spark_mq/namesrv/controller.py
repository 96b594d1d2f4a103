"""The NameServer process: route registry + request handlers on a RemotingServer + eviction scan, and
with ``enableControllerInNamesrv`` the replication controller's handlers on the same server.

``serve`` runs one until SIGTERM/SIGINT: it stops accepting, closes every connection and
returns, so a supervisor's stop is a clean exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path

from spark_mq.common.config import ControllerConfig, NamesrvConfig
from spark_mq.common.errors import RemotingConnectError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.controller.manager import ControllerManager
from spark_mq.controller.server import open_state_store
from spark_mq.namesrv.kv_config import KVConfigManager
from spark_mq.namesrv.processor import NamesrvProcessor
from spark_mq.namesrv.route_info import RouteInfoManager
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


class NamesrvController:
    """Owns the NameServer's parts; ``start``/``stop`` run on one event loop."""

    def __init__(self, config: NamesrvConfig, clock: Callable[[], float] = time.time,
                 controller_config: ControllerConfig | None = None) -> None:
        self.config = config
        self.routes = RouteInfoManager(clock, config.broker_channel_expired_time / 1000, on_evict=self._close_evicted)
        self.kv = KVConfigManager(JsonConfigFile(Path(config.kv_config_path)) if config.kv_config_path else None)
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="namesrv")
        NamesrvProcessor(self.routes, self.kv, config).register_on(self.server)
        self.server.on_connect(lambda conn: conn.on_close(self.routes.on_connection_closed))
        self.replication: ControllerManager | None = None
        if controller_config is not None:  # RocketMQ's enableControllerInNamesrv
            self.replication = ControllerManager(controller_config, open_state_store(controller_config))
            self.replication.register_on(self.server)
        self._scan_task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        return f"{self.config.listen_address}:{self.server.port}"

    async def start(self) -> int:
        """Listen and start the eviction scan; returns the bound port."""
        port = await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan")
        if self.replication is not None:
            await self.replication.start(self.address)
        return port

    async def stop(self) -> None:
        if self.replication is not None:
            await self.replication.stop()
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        await self.server.stop()

    async def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.routes.scan_not_active_brokers()
            except Exception:  # a bug in one scan must not stop the next
                log.exception("scan of inactive brokers failed")

    @staticmethod
    def _close_evicted(addr: str, conn: object | None) -> None:
        if isinstance(conn, Connection):
            conn.close(RemotingConnectError(f"broker {addr} evicted: no heartbeat within the expiry"))


async def serve(config: NamesrvConfig, on_ready: Callable[[str], None] | None = None,
                controller_config: ControllerConfig | None = None) -> None:
    """Run a NameServer (with an embedded controller if ``controller_config``) until SIGTERM or SIGINT."""
    controller = NamesrvController(config, controller_config=controller_config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await controller.start()
    try:
        if on_ready is not None:
            on_ready(controller.address)
        await stop.wait()
        log.info("namesrv stopping on signal")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await controller.stop()
