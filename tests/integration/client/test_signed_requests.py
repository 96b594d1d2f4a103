"""Every request our side sends carries RocketMQ's signature (``AccessKey`` + ``Signature``, as its
AclClientRPCHook computes them) of the account it was given: producers, the transaction producer (its
END_TRANSACTION on a broker's check-back included), the pull, lite-pull and push consumers, the admin, the
CLI, and the broker's own requests to the NameServer (signed with the broker's account).

An in-process NameServer and broker (one event-loop thread) record every request before serving it: the
account named and whether the signature is the one that account's secret gives (``signature_matches``, the
check the server side makes). What a client sends is then judged request by request, code by code.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from servers import run_cli, unique, wait_until

from spark_mq.broker.controller import BrokerController
from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.producer import SyncProducer
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.config import BrokerConfig, NamesrvConfig
from spark_mq.common.errors import MQClientError, SendFailedError
from spark_mq.common.message import Message
from spark_mq.namesrv.controller import NamesrvController
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.loop import LoopThread
from spark_mq.remoting.server import RemotingServer
from spark_mq.remoting.signature import ACCESS_KEY, signature_matches

BROKER_ACCOUNT = ("rocketmq2", "broker-admin-secret-1")  # the broker's own (an admin account)
USER_ACCOUNT = ("RocketMQ", "user-secret-2f9c0a")
SECRETS = dict((BROKER_ACCOUNT, USER_ACCOUNT))
QUEUES = 2
# what the broker itself sends the NameServer meanwhile, every few seconds (judged in its own test)
BROKER_OWN = {RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION}


@dataclass(frozen=True)
class Seen:
    server: str  # "namesrv" or "broker"
    code: int
    access_key: str | None
    signed_right: bool  # the Signature is the one the named account's secret gives


class Recorder:
    """Every request a server is sent, recorded before its handler runs (thread-safe: read from the test). With
    ``refusing`` set it stands in for the server-side ACL gate: a request not signed right is answered
    NO_PERMISSION, as the gate answers, so the client's handling of a refusal can be seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self.refusing = False

    def watch(self, server: RemotingServer, name: str) -> None:
        for code, handler in list(server._handlers.items()):  # a test's view of every request
            server.register(code, self._recording(name, handler))

    def _recording(self, name: str, handler):
        async def handle(cmd: RemotingCommand, conn: Connection):
            key = cmd.ext_fields.get(ACCESS_KEY)
            right = key in SECRETS and signature_matches(SECRETS[key], cmd.ext_fields, cmd.body)
            with self._lock:
                self._seen.append(Seen(name, cmd.code, key, right))
            if self.refusing and not right and cmd.code not in BROKER_OWN:
                return cmd.make_response(ResponseCode.NO_PERMISSION, f"[{key}] signature does not match")
            return await handler(cmd, conn)
        return handle

    def mark(self) -> int:
        with self._lock:
            return len(self._seen)

    def since(self, mark: int) -> list[Seen]:
        with self._lock:
            return self._seen[mark:]


@dataclass
class Servers:
    namesrv: str
    broker: str
    recorder: Recorder


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("signed")
    loop = LoopThread("signed-servers")
    recorder = Recorder()

    async def start() -> tuple[NamesrvController, BrokerController]:
        namesrv = NamesrvController(NamesrvConfig(listen_port=0))
        await namesrv.start()
        recorder.watch(namesrv.server, "namesrv")
        broker = BrokerController(BrokerConfig(
            store_path_root_dir=str(root / "store"), namesrv_addr=namesrv.address, listen_port=0, metrics_port=0,
            access_key=BROKER_ACCOUNT[0], secret_key=BROKER_ACCOUNT[1],
            transaction_time_out=500, transaction_check_interval=200))
        await broker.start()
        recorder.watch(broker.server, "broker")
        return namesrv, broker

    namesrv, broker = loop.run(start(), timeout=60)
    try:
        yield Servers(namesrv.address, broker.address, recorder)
    finally:
        async def stop() -> None:
            await broker.stop()
            await namesrv.stop()
        loop.run(stop(), timeout=60)
        loop.stop()


def user_config(servers: Servers, account: tuple[str, str] = USER_ACCOUNT) -> ClientConfig:
    return ClientConfig(servers.namesrv, instance_name=unique("signed"), access_key=account[0],
                        secret_key=account[1])


def topic_of(servers: Servers, admin: SyncAdmin) -> str:
    """A new topic, routed by the NameServer."""
    topic = unique("signed")
    admin.create_topic(topic, broker_addr=servers.broker, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    wait_until(lambda: admin.route(topic), what="the topic's route")
    return topic


def assert_all_signed_by(seen: list[Seen], account: str, codes: set[int]) -> None:
    """Every request in ``seen`` (but the broker's own) signed right by ``account``, and each of ``codes`` among
    them."""
    seen = [s for s in seen if s.code not in BROKER_OWN]
    wrong = [s for s in seen if s.access_key != account or not s.signed_right]
    assert not wrong, f"requests not signed right by {account}: {wrong}"
    missing = {RequestCode(c).name for c in codes - {s.code for s in seen}}
    assert not missing, f"the client sent none of {missing}"


def test_the_broker_signs_its_registration_with_its_own_account(servers):
    wait_until(lambda: any(s.code == RequestCode.REGISTER_BROKER for s in servers.recorder.since(0)),
               what="a REGISTER_BROKER")
    registrations = [s for s in servers.recorder.since(0) if s.code == RequestCode.REGISTER_BROKER]
    assert registrations and all(s.access_key == BROKER_ACCOUNT[0] and s.signed_right for s in registrations)


def test_producers_and_the_admin_sign_every_request(servers):
    mark = servers.recorder.mark()
    with SyncAdmin(user_config(servers)) as admin:
        topic = topic_of(servers, admin)
        with SyncProducer(unique("signed_pg"), user_config(servers)) as producer:
            producer.send(Message(topic, b"one"))
            producer.send_batch([Message(topic, b"two"), Message(topic, b"three")])
            producer.send_oneway(Message(topic, b"four"))
        admin.topic_stats(topic)
        admin.delete_topic(topic)
    assert_all_signed_by(servers.recorder.since(mark), USER_ACCOUNT[0], {
        RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE, RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
        RequestCode.GET_TOPIC_STATS_INFO, RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV})


def test_the_transaction_producer_signs_its_end_transaction_also_on_a_check_back(servers):
    mark = servers.recorder.mark()
    checked = threading.Event()

    def check(msg) -> LocalTransactionState:
        checked.set()
        return LocalTransactionState.COMMIT_MESSAGE

    with SyncAdmin(user_config(servers)) as admin:
        topic = topic_of(servers, admin)
    with SyncTransactionProducer(unique("signed_tx"), user_config(servers),
                                 lambda m, a: LocalTransactionState.COMMIT_MESSAGE, check) as committed:
        committed.send_message_in_transaction(Message(topic, b"committed"))
    with SyncTransactionProducer(unique("signed_tx"), user_config(servers),
                                 lambda m, a: LocalTransactionState.UNKNOW, check) as unknown:
        unknown.send_message_in_transaction(Message(topic, b"decided by check-back"))
        assert checked.wait(20), "the broker never checked the transaction back"
        # END_TRANSACTION after the commit, after the UNKNOW, then answering the check-back on the broker's connection
        wait_until(lambda: [s.code for s in servers.recorder.since(mark)].count(RequestCode.END_TRANSACTION) >= 3,
                   what="the END_TRANSACTION answering the check-back")
    assert_all_signed_by(servers.recorder.since(mark), USER_ACCOUNT[0],
                         {RequestCode.SEND_MESSAGE_V2, RequestCode.END_TRANSACTION})


def test_the_consumers_sign_every_request(servers):
    mark = servers.recorder.mark()
    with SyncAdmin(user_config(servers)) as admin:
        topic = topic_of(servers, admin)
    with SyncProducer(unique("signed_pg"), user_config(servers)) as producer:
        producer.send_batch([Message(topic, f"m{i}".encode()) for i in range(4)])

    puller = SyncPullConsumer(unique("signed_pull"), user_config(servers))
    puller.start()
    try:
        mq = puller.fetch_queues(topic)[0]
        result = puller.pull(mq, 0)
        puller.update_offset(mq, result.next_begin_offset)
        puller.persist(mq)
        puller.read_offset(mq)
    finally:
        puller.shutdown()

    lite = SyncLitePullConsumer(unique("signed_lite"), user_config(servers), auto_commit=False, consume_from="first")
    lite.subscribe(topic)
    lite.start()
    try:
        got: list = []
        wait_until(lambda: got.extend(lite.poll(0.5)) or len(got) >= 4, what="the lite pull consumer's messages")
        lite.commit()
    finally:
        lite.shutdown()

    pushed = threading.Event()
    push = SyncPushConsumer(unique("signed_push"), user_config(servers), consume_from="first")
    push.subscribe(topic)
    push.register_listener(lambda msgs: pushed.set() or True)
    push.start()
    try:
        assert pushed.wait(20), "the push consumer got nothing"
    finally:
        push.shutdown()
    assert_all_signed_by(servers.recorder.since(mark), USER_ACCOUNT[0], {
        RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT, RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.UNREGISTER_CLIENT})


def test_a_wrong_secret_or_no_account_is_seen_by_the_server(servers):
    """The recorder's judgement can fail: a wrong secret signs wrong, a client without an account sends none."""
    mark = servers.recorder.mark()
    with SyncAdmin(user_config(servers, (USER_ACCOUNT[0], "not-the-secret"))) as admin:
        admin.list_topics()
    wrong = servers.recorder.since(mark)
    assert wrong and all(s.access_key == USER_ACCOUNT[0] and not s.signed_right for s in wrong)
    mark = servers.recorder.mark()
    with SyncAdmin(ClientConfig(servers.namesrv)) as admin:
        admin.list_topics()
    unsigned = servers.recorder.since(mark)
    assert unsigned and all(s.access_key is None for s in unsigned)


def test_the_cli_signs_with_the_environment_or_the_flags_and_never_shows_the_secret(servers, monkeypatch):
    monkeypatch.delenv("SPARK_MQ_NAMESRV", raising=False)
    mark = servers.recorder.mark()
    topic = unique("signed_cli")
    monkeypatch.setenv("SPARK_MQ_ACCESS_KEY", USER_ACCOUNT[0])
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", USER_ACCOUNT[1])
    runs = [
        run_cli("admin", "topic", "create", "--namesrv", servers.namesrv, "--topic", topic, "--broker-addr",
                servers.broker, "--queues", str(QUEUES)),
        run_cli("produce", "--namesrv", servers.namesrv, "--topic", topic, input="hello\n"),
        run_cli("consume", "--namesrv", servers.namesrv, "--topic", topic, "--group", unique("cli_group"),
                "--from", "first", "--max", "1", "--json"),
        run_cli("status", "--namesrv", servers.namesrv, "--access-key", USER_ACCOUNT[0],
                "--secret-key", USER_ACCOUNT[1]),
    ]
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", "a-wrong-one")  # flags win over the environment
    runs.append(run_cli("admin", "topic", "list", "--namesrv", servers.namesrv, "--access-key", USER_ACCOUNT[0],
                        "--secret-key", USER_ACCOUNT[1]))
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert USER_ACCOUNT[1] not in run.stdout + run.stderr
    assert "hello" in runs[2].stdout
    assert_all_signed_by(servers.recorder.since(mark), USER_ACCOUNT[0], {
        RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.SEND_MESSAGE_V2, RequestCode.PULL_MESSAGE,
        RequestCode.GET_BROKER_CLUSTER_INFO, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER})


def test_cli_help_names_the_flags_and_the_environment_and_a_lone_key_is_one_line(servers, monkeypatch):
    help_text = run_cli("produce", "--help").stdout
    assert "--access-key" in help_text and "SPARK_MQ_SECRET_KEY" in help_text
    monkeypatch.delenv("SPARK_MQ_ACCESS_KEY", raising=False)
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", USER_ACCOUNT[1])
    lone = run_cli("status", "--namesrv", servers.namesrv)
    assert lone.returncode == 2 and "without --access-key" in lone.stderr
    assert USER_ACCOUNT[1] not in lone.stderr and "Traceback" not in lone.stderr


@pytest.fixture
def refusing(servers):
    servers.recorder.refusing = True
    yield servers
    servers.recorder.refusing = False


@pytest.mark.parametrize("account", ["wrong secret", "none"])
def test_a_refusal_is_an_error_that_says_what_to_do_and_never_shows_the_secret(refusing, account):
    given = (USER_ACCOUNT[0], "not-the-secret") if account == "wrong secret" else ("", "")
    with SyncProducer(unique("signed_pg"), user_config(refusing, given)) as producer, \
            pytest.raises((MQClientError, SendFailedError)) as refused:  # the route or the send refused
        producer.send(Message("AnyTopic", b"refused"))
    text = str(refused.value)
    assert "NO_PERMISSION" in text and "plain_acl.yml" in text and "not-the-secret" not in text
    assert ("sends no account" in text) == (account == "none")


def test_the_cli_refused_says_what_to_do_in_one_line(refusing, monkeypatch):
    monkeypatch.delenv("SPARK_MQ_ACCESS_KEY", raising=False)
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", "not-the-secret")
    refused = [run_cli("produce", "--namesrv", refusing.namesrv, "--topic", "AnyTopic", "--access-key",
                       USER_ACCOUNT[0], input="refused\n"),
               run_cli("admin", "topic", "list", "--namesrv", refusing.namesrv, "--access-key", USER_ACCOUNT[0])]
    monkeypatch.delenv("SPARK_MQ_SECRET_KEY")
    refused.append(run_cli("status", "--namesrv", refusing.namesrv))
    for run in refused:
        assert run.returncode == 2 and "NO_PERMISSION" in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
        assert "not-the-secret" not in run.stdout + run.stderr
    assert "sends no account" in refused[2].stderr and "--access-key" in refused[2].stderr
