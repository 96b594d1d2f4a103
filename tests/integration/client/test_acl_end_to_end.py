"""Our client against a NameServer and a broker with aclEnable (needs the server-side gate of branch acl-server):
with the right account the producer, the consumers and the CLI work; with a wrong secret or no account they get
NO_PERMISSION, as an error that says what to do and never shows the secret. The servers themselves register and
talk with their admin account (``AclCluster``)."""

from __future__ import annotations

import pytest
from servers import AclCluster, run_cli, unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import PullStatus
from spark_mq.common.errors import MQClientError, SendFailedError
from spark_mq.common.message import Message

QUEUES = 2


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    cluster = AclCluster(tmp_path_factory.mktemp("acl"))
    yield cluster
    cluster.stop()


def config(acl: AclCluster, account: tuple[str, str] | None) -> ClientConfig:
    access, secret = account or ("", "")
    return ClientConfig(acl.namesrv.addr, instance_name=unique("acl"), access_key=access, secret_key=secret)


@pytest.fixture(scope="module")
def topic(acl) -> str:
    """A topic the admin account created (topic creation is an admin operation)."""
    name = unique("acl_topic")
    with SyncAdmin(config(acl, acl.admin)) as admin:
        admin.create_topic(name, broker_addr=acl.broker.addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    return name


def test_the_right_account_sends_and_pulls(acl, topic):
    with SyncProducer(unique("acl_pg"), config(acl, acl.user)) as producer:
        sent = producer.send(Message(topic, b"signed"))
    puller = SyncPullConsumer(unique("acl_cg"), config(acl, acl.user))
    puller.start()
    try:
        mq = next(q for q in puller.fetch_queues(topic) if q.queue_id == sent.queue_id)
        result = puller.pull(mq, sent.queue_offset)
        assert result.status == PullStatus.FOUND and result.messages[0].body == b"signed"
    finally:
        puller.shutdown()


@pytest.mark.parametrize("account", ["wrong secret", "none"])
def test_a_wrong_secret_or_no_account_gets_no_permission_saying_what_to_do(acl, topic, account):
    given = (acl.user[0], "not-the-secret") if account == "wrong secret" else None
    with SyncProducer(unique("acl_pg"), config(acl, given)) as producer, \
            pytest.raises((MQClientError, SendFailedError)) as refused:  # the route or the send refused
        producer.send(Message(topic, b"refused"))
    text = str(refused.value)
    assert "NO_PERMISSION" in text and "plain_acl.yml" in text and "not-the-secret" not in text
    assert ("sends no account" in text) == (given is None)


def test_a_user_account_cannot_administer(acl):
    with SyncAdmin(config(acl, acl.user)) as admin, pytest.raises(MQClientError, match="NO_PERMISSION"):
        admin.create_topic(unique("acl_denied"), broker_addr=acl.broker.addr)


def test_the_broker_registered_with_its_admin_account(acl):
    with SyncAdmin(config(acl, acl.user)) as admin:
        wait_until(lambda: admin.master_addrs(), what="the broker registered at the ACL NameServer")


def test_the_cli_with_the_account_works_and_without_it_says_what_to_do_in_one_line(acl, topic, monkeypatch):
    monkeypatch.setenv("SPARK_MQ_ACCESS_KEY", acl.user[0])
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", acl.user[1])
    sent = run_cli("produce", "--topic", topic, input="from the cli\n", namesrv=acl.namesrv.addr)
    assert sent.returncode == 0, sent.stderr
    monkeypatch.delenv("SPARK_MQ_SECRET_KEY")
    monkeypatch.delenv("SPARK_MQ_ACCESS_KEY")
    refused = run_cli("produce", "--topic", topic, input="refused\n", namesrv=acl.namesrv.addr)
    assert refused.returncode == 2 and "NO_PERMISSION" in refused.stderr and "--access-key" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    for run in (sent, refused):
        assert acl.user[1] not in run.stdout + run.stderr
