"""A process on a machine of its own with no credentials, trying what the issue's attack tool did:
read a topic and write to it at the master, register an impostor broker at the NameServer, and stream
the master's commitlog from its ``haListenPort`` with a raw socket (an offset-0 report as a RocketMQ
slave sends, then whatever the master sends, parsed as HA transfers).

Run as ``python stranger.py --namesrv H:P --broker H:P --ha H:P --topic T --impostor NAME`` on the
stranger's host; prints one JSON object: for ``read``, ``write`` and ``register`` ``"ok"`` or what
refused it (a response code's name, or the connection error), and ``ha_bytes``, the commitlog bytes
received. Uses plain sockets and our client without credentials, as an attacker would.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Callable

from integration.broker._support import host_port, pull_header, send_header

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.headers import RegisterBrokerRequestHeader
from spark_mq.store.ha.ha_protocol import REPORT, TRANSFER_HEADER

TIMEOUT_S = 5.0
HA_LISTEN_S = 3.0  # how long the raw socket waits for commitlog bytes


def outcome(attempt: Callable[[], object]) -> str:
    """``"ok"`` if ``attempt`` went through, else the response code's name or the error that stopped it."""
    try:
        attempt()
    except MQClientError as e:
        return ResponseCode(e.code).name if e.code in ResponseCode._value2member_map_ else str(e.code)
    except Exception as e:  # a refused connection or handshake is a refusal too
        return f"{type(e).__name__}: {e}"
    return "ok"


def ha_commitlog_bytes(addr: str) -> int:
    """Commitlog bytes the master at ``addr`` streams to a raw socket asking from offset 0."""
    got = b""
    try:
        with socket.create_connection(host_port(addr), timeout=TIMEOUT_S) as sock:
            sock.sendall(REPORT.pack(0))
            deadline = time.monotonic() + HA_LISTEN_S
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                data = sock.recv(65536)
                if not data:
                    break
                got += data
    except OSError:
        pass
    total, pos = 0, 0
    while pos + TRANSFER_HEADER.size <= len(got):
        _, size = TRANSFER_HEADER.unpack_from(got, pos)
        total += min(size, len(got) - pos - TRANSFER_HEADER.size)
        pos += TRANSFER_HEADER.size + size
    return total


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("namesrv", "broker", "ha", "topic", "impostor"):
        p.add_argument(f"--{name}", required=True)
    args = p.parse_args()
    api = SyncMQClientAPI(timeout=TIMEOUT_S, connect_timeout=TIMEOUT_S)
    try:
        def read() -> None:
            found = api.pull_message(args.broker, pull_header("stranger", args.topic, 0, 0))
            if not found.body:
                raise RuntimeError(f"pull answered {found.status.name} with no messages")

        fake = TopicConfigSerializeWrapper({args.topic: TopicConfig(args.topic, 8, 8)}, DataVersion(1, 1))
        header = RegisterBrokerRequestHeader(broker_name=args.impostor, broker_addr=args.broker,
                                             cluster_name="DefaultCluster", ha_server_addr=args.ha, broker_id=0)
        result = {
            "read": outcome(read),
            "write": outcome(lambda: api.send_message(args.broker, send_header(args.topic, 0), b"stranger")),
            "register": outcome(lambda: api.register_broker(args.namesrv, header, RegisterBrokerBody(fake))),
            "ha_bytes": ha_commitlog_bytes(args.ha),
        }
    finally:
        api.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
