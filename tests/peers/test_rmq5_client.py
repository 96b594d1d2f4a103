"""The official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client``, unmodified, in its own venv
``.venv-rmq5`` made by scripts/install_rmq5_client.sh) against a broker with ``enableGrpcEndpoint=true``: its
Producer sends normal, FIFO, delay and transactional messages (an unresolved one checked back over its Telemetry
stream), and the official C++ 4.x client consumes them over remoting; with aclEnable it is let in with the same
accounts as remoting. The other way round, its SimpleConsumer (receive, ack, change invisible duration, an unacked
message back after its invisible time) and PushConsumer (everything exactly once) read what the C++ client sent,
through the broker's pop. Real ``spark-mq namesrv`` / ``spark-mq broker`` processes; the 5.x client runs as
``rmq5_producer_process.py`` / ``rmq5_consumer_process.py`` in that venv."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from integration.acl._support import ADMIN, DENIED, PUBLISHER, TOPIC, acl_conf, write_acl
from servers import Broker, free_port, run_cli, unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.commands.certs import make_certs
from spark_mq.common.tls import client_context

try:
    from rocketmq.client import Message, Producer, PushConsumer, SendStatus
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
# the venv's python; RMQ5_PYTHON names another (a git worktree using its main checkout's venv)
RMQ5_PYTHON = Path(os.environ.get("RMQ5_PYTHON", ROOT / ".venv-rmq5" / "bin" / "python"))
PROGRAM = Path(__file__).with_name("rmq5_producer_process.py")
CONSUMER = Path(__file__).with_name("rmq5_consumer_process.py")
PROGRAM_TIMEOUT_S = 90

pytestmark = pytest.mark.timeout(150)


def _rmq5_python() -> Path:
    """The 5.x client's python, its venv made first when missing; skips (saying why) when it cannot be made."""
    if not RMQ5_PYTHON.exists():
        made = subprocess.run(["bash", str(ROOT / "scripts" / "install_rmq5_client.sh")], capture_output=True,
                              text=True, timeout=600)
        if made.returncode != 0 or not RMQ5_PYTHON.exists():
            pytest.skip(f"the RocketMQ 5.x client's venv cannot be made (scripts/install_rmq5_client.sh: "
                        f"{made.stderr.strip()[-300:]})")
    return RMQ5_PYTHON


def cpp_send(namesrv: str, topic: str, bodies: list[str]) -> None:
    """Send ``bodies`` with the C++ 4.x client's producer over remoting."""
    producer = Producer(unique("cpp_p"))
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for body in bodies:
            m = Message(topic)
            m.set_body(body)
            assert producer.send_sync(m).status == SendStatus.OK
    finally:
        producer.shutdown()


def consume_rmq5(mode: str, endpoint: str, topic: str, count: int, send, group: str | None = None
                 ) -> tuple[list[dict], str]:
    """Run a 5.x consumer program of ``group`` (a new one by default); ``send()`` once it is READY; its JSON lines and
    output."""
    proc = subprocess.Popen([str(_rmq5_python()), str(CONSUMER), mode, endpoint, topic, group or unique("rmq5_g"),
                             str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=CONSUMER.parent)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("READY"):
                send()
                break
        out, err = proc.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines) + out
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return records, output + err[-2000:]


def run_rmq5(mode: str, endpoint: str, topic: str, *credentials: str, trust: Path | None = None
             ) -> tuple[list[dict], str]:
    """Run the 5.x client program (over TLS trusting the CA file ``trust`` when given); its JSON lines and its whole
    output."""
    env = dict(os.environ)
    if trust is not None:
        env.update(RMQ5_TLS="1", GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(trust))
    proc = subprocess.run([str(_rmq5_python()), str(PROGRAM), mode, endpoint, topic, *credentials],
                          capture_output=True, text=True, timeout=PROGRAM_TIMEOUT_S, cwd=PROGRAM.parent, env=env)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return records, proc.stdout + proc.stderr[-2000:]


def grpc_broker(namesrv: str, root: Path, extra: str = "") -> tuple[Broker, str]:
    port = free_port()
    broker = Broker(namesrv, root, f"enableGrpcEndpoint=true\ngrpcListenPort={port}\n{extra}",
                    broker_name=unique("grpc"))
    return broker, f"127.0.0.1:{port}"


class CppConsumer:
    """The C++ 4.x push consumer of a topic, recording (body, queue id, queue offset, store ms, message) per body."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.got: dict[str, tuple[int, int, int, dict[str, str]]] = {}
        self.lock = threading.Lock()
        self.consumer = PushConsumer(unique("rmq5_cpp"))
        self.consumer.set_instance_name(unique("cpp_c"))
        self.consumer.set_namesrv_addr(namesrv)
        self.consumer.subscribe(topic, self._on_message)

    def _on_message(self, msg) -> None:
        props = {"id": msg.id, "tags": (msg.tags or b"").decode(), "keys": (msg.keys or b"").decode(),
                 "seq": (msg.get_property("seq") or b"").decode()}
        with self.lock:
            self.got.setdefault(msg.body.decode(), (msg.queue_id, msg.queue_offset, msg.store_timestamp, props))

    def __enter__(self) -> CppConsumer:
        self.consumer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.consumer.shutdown()


def _create_topic(namesrv: str, broker: Broker, topic: str, queues: int) -> None:
    with SyncMQClientAPI(timeout=5.0) as api:
        api.create_topic(broker.addr, topic, queues, queues)
        wait_until(lambda: api.get_route_info(namesrv, topic), what=f"route of {topic}")


def test_rmq5_producer_normal_fifo_delay_consumed_by_cpp_client(tmp_path: Path, namesrv):
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b")
    topic = unique("Rmq5Send")
    try:
        _create_topic(namesrv, broker, topic, 4)
        with CppConsumer(namesrv, topic) as cpp:
            sent, output = run_rmq5("send", endpoint, topic)
            assert output.rstrip().endswith("DONE"), output
            assert len(sent) == 11, output
            wait_until(lambda: len(cpp.got) >= len(sent), 60, "every 5.x message at the C++ consumer")
        assert sorted(cpp.got) == sorted(m["body"] for m in sent)
        for m in sent:
            _, _, stored_ms, props = cpp.got[m["body"]]
            assert props["id"] == m["id"], f"{m['body']}: the 4.x client sees the 5.x client's message id"
            if m["kind"] == "normal":
                assert (props["tags"], props["keys"], props["seq"]) == ("TagA", f"key-{m['body'][-1]}",
                                                                          m["body"][-1])
            if m["kind"] == "delay":
                assert stored_ms >= m["due_ms"], f"{m['body']} stored {m['due_ms'] - stored_ms} ms before it was due"
        for group in ("g1", "g2"):  # a message group is one queue, in send order
            placed = [cpp.got[m["body"]][:2] for m in sent if m.get("group") == group]
            assert len({queue for queue, _ in placed}) == 1, f"group {group} spread over queues: {placed}"
            assert [offset for _, offset in placed] == sorted(offset for _, offset in placed)
    finally:
        broker.stop()


def test_rmq5_transactions_commit_rollback_and_check_back(tmp_path: Path, namesrv):
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b", "transactionCheckInterval=500\n"
                                                             "transactionTimeOut=1000\n")
    topic = unique("Rmq5Txn")
    try:
        _create_topic(namesrv, broker, topic, 2)
        with CppConsumer(namesrv, topic) as cpp:
            started = time.monotonic()
            sent, output = run_rmq5("transaction", endpoint, topic)
            assert output.rstrip().endswith("DONE"), output
            checked = [r for r in sent if "checked" in r]
            unresolved = next(r for r in sent if r.get("decision") == "unresolved")
            assert [r["checked"] for r in checked] == [unresolved["id"]], output
            wait_until(lambda: {"txn-commit", "txn-unresolved"} <= set(cpp.got), 30,
                       "the committed and the checked-back transaction at the C++ consumer")
            print(f"5.x transactions with a check-back: {time.monotonic() - started:.1f} s")
        assert "txn-rollback" not in cpp.got
        assert cpp.got["txn-unresolved"][3]["id"] == unresolved["id"]
    finally:
        broker.stop()


def test_rmq5_producer_checked_against_the_acl_accounts(tmp_path: Path, namesrv):
    acl = write_acl(tmp_path / "acl")
    signing = f"accessKey={ADMIN.access_key}\nsecretKey={ADMIN.secret_key}\n"
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b", acl_conf(acl) + signing)
    try:
        created = run_cli("admin", "topic", "create", "--topic", TOPIC, "--queues", "2", "--broker-addr", broker.addr,
                          "--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key, namesrv=namesrv)
        assert created.returncode == 0, created.stderr
        sent, output = run_rmq5("send", endpoint, TOPIC, PUBLISHER.access_key, PUBLISHER.secret_key)
        assert output.rstrip().endswith("DONE") and len(sent) == 11, output
        _, wrong_secret = run_rmq5("send", endpoint, TOPIC, PUBLISHER.access_key, "not-the-secret")
        assert "ERROR" in wrong_secret, wrong_secret  # its route refused: the client says only that it has none
        assert f"accessKey={PUBLISHER.access_key}: the signature does not match" in broker.log()
        _, denied = run_rmq5("send", endpoint, TOPIC, DENIED.access_key, DENIED.secret_key)
        assert "ERROR" in denied and f"needs PUB on topic {TOPIC}" in denied, denied
        assert "not-the-secret" not in broker.log()
    finally:
        broker.stop()


def test_rmq5_simple_consumer_receives_acks_changes_invisible_and_sees_the_unacked_again(tmp_path: Path, namesrv):
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b")
    topic = unique("Rmq5Simple")
    bodies = [f"cpp-{i}" for i in range(6)]
    try:
        _create_topic(namesrv, broker, topic, 2)
        started = time.monotonic()
        records, output = consume_rmq5("simple", endpoint, topic, len(bodies), lambda: cpp_send(namesrv, topic, bodies))
        assert output.rstrip().endswith("DONE"), output
        print(f"5.x SimpleConsumer round: {time.monotonic() - started:.1f} s")
        (left,) = [r["left"] for r in records if "left" in r]
        received = [(r["received"], r["attempt"]) for r in records if "received" in r]
        assert sorted({b for b, _ in received}) == sorted(bodies), output
        assert received.count((left, 1)) == 1 and received.count((left, 2)) == 1, output  # back after its time
        assert sorted(r["acked"] for r in records if "acked" in r) == sorted(bodies), output
        assert len([r for r in records if "changed" in r]) == 1, output
        others = [b for b, _ in received if b != left]
        assert len(others) == len(set(others)), f"an acknowledged message came again: {output}"
    finally:
        broker.stop()


def test_rmq5_push_consumer_consumes_everything_exactly_once(tmp_path: Path, namesrv):
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b")
    topic = unique("Rmq5Push")
    bodies = [f"push-{i}" for i in range(40)]
    try:
        _create_topic(namesrv, broker, topic, 4)
        records, output = consume_rmq5("push", endpoint, topic, len(bodies), lambda: cpp_send(namesrv, topic, bodies))
        assert output.rstrip().endswith("DONE"), output
        consumed = [r["consumed"] for r in records if "consumed" in r]
        assert sorted(consumed) == sorted(bodies), output
    finally:
        broker.stop()


def test_rmq5_producer_over_tls(tmp_path: Path, namesrv):
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs, [], [])
    tls = (f"tls.server.mode=enforcing\ntls.server.certPath={certs / 'server.pem'}\n"
           f"tls.server.keyPath={certs / 'server.key'}\n")
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b", tls)
    topic = unique("Rmq5Tls")
    try:
        with SyncMQClientAPI(timeout=5.0, ssl_context=client_context(str(certs / "ca.pem"))) as api:
            api.create_topic(broker.addr, topic, 2, 2)
        sent, output = run_rmq5("send", endpoint, topic, trust=certs / "ca.pem")
        assert output.rstrip().endswith("DONE") and len(sent) == 11, output
        _, plaintext = run_rmq5("send", endpoint, topic)  # the client's default: plaintext, refused
        assert "ERROR" in plaintext, plaintext
    finally:
        broker.stop()


def _stored(broker: Broker, topic: str, queues: int) -> int:
    """How many messages of ``topic`` ``broker`` stores."""
    with SyncMQClientAPI(timeout=5.0) as api:
        return sum(api.get_max_offset(broker.addr, topic, q) for q in range(queues))


def test_rmq5_client_at_one_broker_reaches_every_broker_set(tmp_path: Path, namesrv):
    """Each broker announces its gRPC port (runtime info ``grpcListenPort``); the one a 5.x client dials names every
    set's queues with their masters' gRPC addresses, so its sends and receives reach both sets."""
    (a, endpoint), (b, _) = grpc_broker(namesrv, tmp_path / "a"), grpc_broker(namesrv, tmp_path / "b")
    topic = unique("Rmq5Sets")
    try:
        for broker in (a, b):
            _create_topic(namesrv, broker, topic, 2)
        with SyncMQClientAPI(timeout=5.0) as api:
            wait_until(lambda: len(api.get_route_info(namesrv, topic).broker_datas) == 2, what="both sets routed")
        sent, output = run_rmq5("normal", endpoint, topic)
        assert output.rstrip().endswith("DONE") and len(sent) == 20, output
        on_a, on_b = _stored(a, topic, 2), _stored(b, topic, 2)
        assert on_a + on_b == 20 and on_a > 0 and on_b > 0, f"{on_a} on {a.name}, {on_b} on {b.name}"
        records, output = consume_rmq5("push", endpoint, topic, len(sent), lambda: None)
        assert output.rstrip().endswith("DONE"), output
        assert sorted({r["consumed"] for r in records if "consumed" in r}) == sorted(m["body"] for m in sent), output
    finally:
        a.stop()
        b.stop()


def test_rmq5_fifo_messages_consumed_in_order_by_an_orderly_group(tmp_path: Path, namesrv):
    """A group with consumeMessageOrderly (``spark-mq admin group update --orderly``): its 5.x SimpleConsumer gets
    each message group in send order, and nothing more of a message group while one of its messages is in flight;
    its 5.x PushConsumer (told fifo=true in its Telemetry settings) consumes each message group in order."""
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b")
    topic, simple, push = unique("Rmq5Fifo"), unique("rmq5_fifo_s"), unique("rmq5_fifo_p")
    try:
        _create_topic(namesrv, broker, topic, 1)  # every message group in one queue: a pop not orderly hands out
        # the messages after those in flight, of the same groups
        for group in (simple, push):
            made = run_cli("admin", "group", "update", "--group", group, "--orderly", namesrv=namesrv)
            assert made.returncode == 0, made.stderr
        sent, output = run_rmq5("fifo", endpoint, topic)
        assert output.rstrip().endswith("DONE") and len(sent) == 20, output
        order = {m["body"]: (m["group"], m["seq"]) for m in sent}
        records, output = consume_rmq5("fifo", endpoint, topic, len(sent), lambda: None, group=simple)
        assert output.rstrip().endswith("DONE"), output
        received = [r for r in records if "received" in r]
        assert sorted(r["received"] for r in received) == sorted(order), output
        in_flight = {order[r["received"]][0] for r in received if r["batch"] == "first"}
        held = {order[r["received"]][0] for r in received if r["batch"] == "held"}
        assert in_flight and not in_flight & held, f"a message group's next message came while one was unacked: " \
                                                   f"{output}"
        for group in {g for g, _ in order.values()}:
            seqs = [order[r["received"]][1] for r in received if order[r["received"]][0] == group]
            assert seqs == sorted(seqs), f"message group {group} out of order: {seqs}"
        records, output = consume_rmq5("push", endpoint, topic, len(sent), lambda: None, group=push)
        assert output.rstrip().endswith("DONE"), output
        consumed = [r["consumed"] for r in records if "consumed" in r]
        assert sorted(set(consumed)) == sorted(order), output
        for group in {g for g, _ in order.values()}:
            seqs = [order[b][1] for b in consumed if order[b][0] == group]
            assert seqs == sorted(seqs), f"message group {group} consumed out of order: {seqs}"
    finally:
        broker.stop()


def _start_idle_clients(endpoint: str, topic: str, group: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """A 5.x SimpleConsumer of ``group`` and Producer of ``topic`` that stay connected; their client ids by kind."""
    proc = subprocess.Popen([str(_rmq5_python()), str(CONSUMER), "idle", endpoint, topic, group, "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=CONSUMER.parent)
    ids = {}
    for line in proc.stdout:
        if line.startswith("{"):
            record = json.loads(line)
            ids[record["kind"]] = record["client_id"]
        if line.startswith(("READY", "ERROR")):
            break
    assert len(ids) == 2, f"the 5.x clients did not start: {proc.stderr.read()[-2000:] if proc.poll() else ''}"
    return proc, ids


def test_rmq5_clients_listed_in_the_admin_views_until_they_end(tmp_path: Path, namesrv):
    """5.x clients show in GET_CONSUMER_LIST_BY_GROUP and in ``spark-mq admin group clients`` (consumer and producer
    groups) while connected, and are gone once they shut down (NotifyClientTermination) or are killed (stream end)."""
    broker, endpoint = grpc_broker(namesrv, tmp_path / "b")
    topic, group = unique("Rmq5Clients"), unique("rmq5_listed")
    producer_group = f"rmq_grpc_producer_{topic}"

    def listed(*extra: str) -> str:
        return run_cli("admin", "group", "clients", *extra, namesrv=namesrv).stdout

    try:
        _create_topic(namesrv, broker, topic, 2)
        with SyncMQClientAPI(timeout=5.0) as api:
            for end in ("shutdown", "kill"):
                proc, ids = _start_idle_clients(endpoint, topic, group)
                try:
                    member = ids["consumer"]
                    wait_until(lambda m=member: m in api.get_consumer_list_by_group(broker.addr, group), 10,
                               "the 5.x consumer in its group")
                    consumers = listed("--group", group)
                    assert ids["consumer"] in consumers and "PYTHON" in consumers, consumers
                    producers = listed("--group", producer_group, "--producer")
                    assert ids["producer"] in producers and "PYTHON" in producers, producers
                    if end == "shutdown":
                        proc.communicate("\n", timeout=PROGRAM_TIMEOUT_S)
                    else:
                        proc.kill()
                        proc.wait()
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                wait_until(lambda: "no client online" in run_cli("admin", "group", "clients", "--group", group,
                                                                  namesrv=namesrv).stderr, 10,
                           f"the 5.x consumer gone after its {end}")
                assert "no client online" in run_cli("admin", "group", "clients", "--group", producer_group,
                                                     "--producer", namesrv=namesrv).stderr
    finally:
        broker.stop()
