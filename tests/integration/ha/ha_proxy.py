"""A loopback proxy between a slave and its master's HA port (the slave's ``haMasterAddress`` names it), so a
test stops the HA stream where it chooses instead of racing a SIGSTOP against the transfer.

``cut_after(at)``: on the next connection the master's transfers (RocketMQ's HA protocol: a 12-byte header,
then the body) reach the slave whole, up to the first one whose end offset satisfies ``at``; after it nothing
more does (what the master sends is read and dropped), and ``cut`` is that end. Either side closing still
closes the other. Later connections pass everything.

``black_hole()``: the connections open now forward nothing more, either way, and no close crosses them (a
route gone dark: neither end hears anything, as across a lost NAT entry or a pulled cable); later
connections pass everything.

Threads and blocking sockets; ``close`` ends every connection and the listener.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from spark_mq.store.ha.ha_protocol import TRANSFER_HEADER

CHUNK = 64 * 1024


class _Link:
    """One slave connection and its connection to the master."""

    def __init__(self, slave: socket.socket, master: socket.socket, cut_at: Callable[[int], bool] | None) -> None:
        self.slave = slave
        self.master = master
        self.cut_at = cut_at
        self.dark = False  # forwards nothing more (after the cut, or black-holed)
        self.black_holed = False  # and no close crosses it

    def close(self) -> None:
        for s in (self.slave, self.master):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class HAProxy:
    def __init__(self, master_ha_addr: str) -> None:
        host, _, port = master_ha_addr.rpartition(":")
        self.target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._links: list[_Link] = []
        self._cut_at: Callable[[int], bool] | None = None
        self._cut = threading.Event()
        self.cut = -1  # the commitlog offset the stream was cut at
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="ha-proxy").start()

    def cut_after(self, at: Callable[[int], bool]) -> None:
        self._cut_at = at

    def wait_cut(self, timeout: float) -> int:
        """The offset the stream was cut at, once it was."""
        assert self._cut.wait(timeout), f"no transfer to cut after in {timeout} s"
        return self.cut

    def black_hole(self) -> None:
        with self._lock:
            for link in self._links:
                link.dark = link.black_holed = True

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for link in self._links:
                link.close()

    def _accept(self) -> None:
        while True:
            try:
                slave, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                master = socket.create_connection(self.target, timeout=5)
            except OSError:  # the master is down: the slave sees its connection end, as it would
                slave.close()
                continue
            master.settimeout(None)
            link = _Link(slave, master, self._cut_at)
            self._cut_at = None
            with self._lock:
                self._links.append(link)
            down = self._transfers if link.cut_at is not None else self._pump
            threading.Thread(target=down, args=(link, link.master, link.slave), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, link.slave, link.master), daemon=True).start()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        """Forward ``src`` to ``dst`` until either ends (dropping what comes once the link is dark)."""
        with contextlib.suppress(OSError):
            while data := src.recv(CHUNK):
                if not link.dark:
                    dst.sendall(data)
        if not link.black_holed:
            link.close()

    def _transfers(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        """Forward the master's transfers whole until the one to cut after, then drop the rest."""
        pending = bytearray()
        with contextlib.suppress(OSError):
            while not link.dark and (data := src.recv(CHUNK)):
                pending += data
                while len(pending) >= TRANSFER_HEADER.size:
                    offset, size = TRANSFER_HEADER.unpack_from(pending)
                    whole = TRANSFER_HEADER.size + size
                    if len(pending) < whole:
                        break
                    dst.sendall(pending[:whole])
                    del pending[:whole]
                    if size and link.cut_at(offset + size):
                        link.dark = True
                        self.cut = offset + size
                        self._cut.set()
                        break
        self._pump(link, src, dst)
