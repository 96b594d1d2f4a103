"""Run a process until SIGTERM or SIGINT: the one shutdown path of the NameServer, the controller,
the broker and ``spark-mq dev``, so that a supervisor's stop is always a clean exit (every server
stopped, every connection closed) and never a traceback.

Runs on the process's event loop; the signal handlers are the loop's, installed for the run only.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Server(Protocol):
    """A process's server: it listens once started, and stops cleanly."""

    @property
    def address(self) -> str: ...

    async def start(self) -> object: ...

    async def stop(self) -> None: ...


async def serve_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Await ``main(stop)``, ``stop`` being set on SIGTERM or SIGINT; ``main`` stops what it started
    once ``stop`` is set, and returns."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        await main(stop)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def run_server(server: Server, stop: asyncio.Event, on_ready: Callable[[str], None] | None = None) -> None:
    """Start ``server``, give ``on_ready`` its address, and stop it once ``stop`` is set."""
    await server.start()
    try:
        if on_ready is not None:
            on_ready(server.address)
        await stop.wait()
    finally:
        await server.stop()
