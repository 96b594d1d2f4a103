"""Serving the console: uvicorn on a socket bound here (so a port in use is one clear error, and port 0
picks a free one), inside the caller's event loop and stopped by the caller's ``stop`` event —
``spark-mq dashboard`` and ``spark-mq dev --dashboard`` own the process's signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn

from spark_mq.client.config import ClientConfig
from spark_mq.common.config import is_loopback
from spark_mq.common.errors import ConfigError, PortInUseError
from spark_mq.dashboard.app import create_app
from spark_mq.dashboard.auth import ANONYMOUS, Account
from spark_mq.dashboard.clients import ClusterClients
from spark_mq.dashboard.sampler import SAMPLE_INTERVAL_S

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"  # the console changes the cluster: reachable from this machine only unless asked
DEFAULT_PORT = 8080


@dataclass(frozen=True)
class DashboardConfig:
    client: ClientConfig  # the NameServers, TLS
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    account: Account = ANONYMOUS  # what the sampler signs with (ANONYMOUS: the last login's)
    controller_addrs: tuple[str, ...] = ()  # () : ask the NameServers
    sample_interval_s: float = SAMPLE_INTERVAL_S
    allow_insecure_remote: bool = False  # serve beyond loopback over plain HTTP (a trusted network only)
    archive_root: str = ""  # the tiered archive's root ("" : no archive figures)

    def __post_init__(self) -> None:
        if self.sample_interval_s <= 0:
            raise ConfigError(f"sample interval {self.sample_interval_s:g}s: give a positive number of seconds")
        if not (is_loopback(self.host) or self.allow_insecure_remote):
            raise ConfigError(f"--host {self.host} serves the console to other machines over plain HTTP: anyone "
                              f"reaching it could change the cluster, and log-ins would cross the network in the "
                              f"clear; keep 127.0.0.1 behind a TLS reverse proxy, or on a trusted network give "
                              f"--allow-insecure-remote")


class _Server(uvicorn.Server):
    """uvicorn's server leaving the process's signals to the caller."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise PortInUseError(f"the console cannot listen on {host}:{port} ({e.strerror}): pick another --port "
                             f"or stop what uses it") from e
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve(config: DashboardConfig, stop: asyncio.Event, ready: Callable[[str], None] | None = None) -> None:
    """Serve the console until ``stop`` is set; ``ready(url)`` once it listens."""
    sock = bind(config.host, config.port)
    app = create_app(ClusterClients(config.client), account=config.account,
                     controller_addrs=list(config.controller_addrs), sample_interval_s=config.sample_interval_s,
                     archive_root=config.archive_root)
    server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
        return
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    log.info("console on %s", url)
    if ready is not None:
        ready(url)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    stopped.cancel()
    await task
    sock.close()
