"""Helpers of the peer tests (the server processes come from ``tests/servers.py``)."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from spark_mq.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

LEDGER_BODY_PREFIX = "cppfo:"


def cpp_log(home: Path) -> str:
    """What the C++ client logged under ``home`` (it writes ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.N``)."""
    return "".join(p.read_text(errors="replace") for p in (home / "logs" / "rocketmq-cpp").glob("*rocketmq-cpp.log*"))


def ledger_body(seq: int) -> str:
    """The body of ledger message ``seq`` (``cpp_producer_process.py``): it names the seq (``ledger_seq`` reads it
    back from a commitlog), padded to about 100 bytes."""
    head = f"{LEDGER_BODY_PREFIX}{seq}:"
    return head + "x" * (100 - len(head))


def ledger_seq(body: bytes) -> int | None:
    text = body.decode(errors="replace")
    if not text.startswith(LEDGER_BODY_PREFIX):
        return None
    return int(text[len(LEDGER_BODY_PREFIX):].split(":", 1)[0])


def run_until_sigterm(worker: Callable[[threading.Event], None]) -> None:
    """``worker(stop)`` in a thread of a client process; SIGTERM sets ``stop``. The main thread only waits, so it
    stays free to run the SIGTERM handler (a C call of the worker does not hold it up); ``DONE`` once it returned."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=worker, args=(stop,))
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    print("DONE", flush=True)


def register_fake_broker(client: SyncRemotingClient, namesrv: str, broker_addr: str, topic: str) -> None:
    """Register ``broker-cpp`` at ``broker_addr`` serving ``topic`` (4 queues) at ``namesrv``; keep ``client``'s
    connection open while the registration should last (closing it evicts the broker)."""
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({topic: TopicConfig(topic, 4, 4, 6)}, DataVersion(1, 1))).to_json()
    header = {"brokerName": "broker-cpp", "brokerAddr": broker_addr, "clusterName": "CppCluster",
              "haServerAddr": "", "brokerId": 0}
    resp = client.invoke(namesrv, RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body))
    assert resp.code == ResponseCode.SUCCESS


@contextlib.contextmanager
def recording_broker() -> Iterator[tuple[str, list[RemotingCommand]]]:
    """A fake broker: ``(its address, what it received)``. It takes one connection, decodes every request and
    answers it SYSTEM_ERROR; it stops when the block ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(30)
    got: list[RemotingCommand] = []

    def record() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            decoder = FrameDecoder()
            while data := conn.recv(65536):
                for cmd in decoder.feed(data):
                    got.append(cmd)
                    if not cmd.is_oneway:
                        conn.sendall(encode(cmd.make_response(ResponseCode.SYSTEM_ERROR, "recorder")))

    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", got
    finally:
        listener.close()
        thread.join(5)
