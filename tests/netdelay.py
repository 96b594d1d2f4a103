"""Added latency without ``tc netem`` (which this machine's kernel lacks): run in a host's namespace, this
process binds an NFQUEUE queue over nfnetlink and gives each packet the kernel queues there its ACCEPT
verdict ``--ms`` after it arrived, in arrival order. ``faults.Faults.latency`` starts it and adds the
iptables rule that queues the packets arriving on the host's link (``-j NFQUEUE --queue-bypass``: with no
process bound, packets pass). The protocol is spoken with Python's own ``socket`` (AF_NETLINK, NETLINK_NETFILTER), no
library: config BIND with metadata-only copies, PACKET messages in, batch VERDICT messages out. On SIGTERM it lets
every packet it still holds go, then exits.

    ip netns exec NS python tests/netdelay.py --queue=0 --ms=100
"""

from __future__ import annotations

import argparse
import collections
import select
import signal
import socket
import struct
import subprocess
import sys
import time

QUEUE = 0  # the NFQUEUE queue number the delayer binds in its namespace (one delayer per namespace)
NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1  # a full queue lets packets pass rather than dropping them
NFQA_CFG_F_GSO = 4  # whole GSO/GRO packets, not one message per segment: a tenth of the messages for bulk flows
NF_ACCEPT = 1
QUEUE_MAXLEN = 65536
RCVBUF = 8 << 20
BOUND = "netdelay bound"  # its first line on stdout, once the queue is bound
BIND_TIMEOUT_S = 10.0


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _messages(data: bytes):
    """(type, payload) of each netlink message in one datagram."""
    while len(data) >= 16:
        length, kind = struct.unpack_from("=IH", data)
        yield kind, data[16:length]
        data = data[(length + 3) & ~3:]


def _packet_id(payload: bytes) -> int | None:
    attrs = payload[4:]  # past nfgenmsg
    while len(attrs) >= 4:
        length, kind = struct.unpack_from("=HH", attrs)
        if kind & 0x7FFF == NFQA_PACKET_HDR:
            return struct.unpack_from(">I", attrs, 4)[0]
        attrs = attrs[(length + 3) & ~3:]
    return None


class Delayer:
    """One bound queue and the packets it holds, oldest first."""

    def __init__(self, queue: int, delay_s: float) -> None:
        self.queue = queue
        self.delay_s = delay_s
        self.held: collections.deque[tuple[float, int]] = collections.deque()
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.bind((0, 0))
        self.seq = 0
        self._config(_attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)))
        self._config(_attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
                     + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN))
                     + _attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))
                     + _attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)))

    def _config(self, attrs: bytes) -> None:
        """Send a CONFIG message and wait for its ack; the kernel's error raises."""
        self.seq += 1
        self.sock.sendall(_message(NFQNL_MSG_CONFIG, self.queue, attrs, self.seq, NLM_F_REQUEST | NLM_F_ACK))
        deadline = time.monotonic() + BIND_TIMEOUT_S
        while time.monotonic() < deadline:
            for kind, payload in _messages(self.sock.recv(RCVBUF)):
                if kind == NLMSG_ERROR:
                    error = -struct.unpack_from("=i", payload)[0]
                    if error:
                        raise OSError(error, f"binding NFQUEUE {self.queue}: {socket.errno.errorcode.get(error)}")
                    return
        raise TimeoutError(f"no answer binding NFQUEUE {self.queue}")

    def release(self, until: float) -> None:
        """ACCEPT every held packet due by ``until``: one batch verdict for all ids up to the last due (ids grow
        with arrival and every packet is held equally long, so those are exactly the due ones)."""
        last = None
        while self.held and self.held[0][0] <= until:
            last = self.held.popleft()[1]
        if last is not None:
            self.seq += 1
            self.sock.sendall(_message(NFQNL_MSG_VERDICT_BATCH, self.queue,
                                       _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, last)), self.seq))

    def run(self) -> None:
        """Hold and release packets until SIGTERM (raised here as SystemExit), then release what is held."""
        try:
            self._loop()
        finally:
            self.release(float("inf"))

    def _loop(self) -> None:
        while True:
            wait = max(0.0, self.held[0][0] - time.monotonic()) if self.held else None
            readable, _, _ = select.select([self.sock], [], [], wait)
            if readable:
                arrived = time.monotonic()
                for kind, payload in _messages(self.sock.recv(RCVBUF)):
                    if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET and (pid := _packet_id(payload)) is not None:
                        self.held.append((arrived + self.delay_s, pid))
            self.release(time.monotonic())


def wait_bound(proc: subprocess.Popen) -> None:
    """Return once ``proc`` (this script, stdout piped) has bound its queue; raise with its words if it failed."""
    line = proc.stdout.readline().decode(errors="replace").strip()
    if line != BOUND:
        rest = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
        raise RuntimeError(f"netdelay did not bind its queue: {line} {rest}".strip())


def _exit(*_) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Delay every packet queued to an NFQUEUE queue by --ms.")
    parser.add_argument("--queue", type=int, default=QUEUE, help="the NFQUEUE queue number (default %(default)s)")
    parser.add_argument("--ms", type=float, required=True, help="the delay added to each packet, in ms")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit)
    try:
        delayer = Delayer(args.queue, args.ms / 1000)
    except OSError as e:
        print(f"netdelay: {e} (needs root in the namespace and a kernel with NETFILTER_NETLINK_QUEUE)", flush=True)
        return 1
    print(BOUND, flush=True)
    delayer.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
