"""The controller process (``spark-mq controller``): a ControllerManager on a RemotingServer of its own.

``serve`` runs one until SIGTERM/SIGINT, then leaves the election, closes every connection and returns.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from spark_mq.common.config import ControllerConfig
from spark_mq.controller.local_state_store import LocalStateStore
from spark_mq.controller.manager import ControllerManager
from spark_mq.controller.state_store import ControllerStateStore
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


def open_state_store(config: ControllerConfig) -> ControllerStateStore:
    """The store the controller's decisions and leadership live in (the one place that chooses it)."""
    return LocalStateStore(config.controller_store_path)


class ControllerServer:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="controller")
        self.manager = ControllerManager(config, open_state_store(config))
        self.manager.register_on(self.server)

    @property
    def address(self) -> str:
        return f"{self.config.listen_address}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        await self.manager.start(self.address)

    async def stop(self) -> None:
        await self.manager.stop()
        await self.server.stop()


async def serve(config: ControllerConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a controller until SIGTERM or SIGINT."""
    controller = ControllerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await controller.start()
    try:
        if on_ready is not None:
            on_ready(controller.address)
        await stop.wait()
        log.info("controller stopping on signal")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await controller.stop()
