"""``spark-mq dev --acl``: the dev servers run with aclEnable against a plain_acl.yml of fresh secrets (mode 0600),
sign their own requests with its admin account, and say how to use the publisher/subscriber account
(``credentials.env``, mode 0600) without ever printing or logging a secret. The CLI with that account sends and
reads; without it, the servers refuse with a one-line error saying what to do (needs the server-side ACL gate)."""

from __future__ import annotations

import os
import re
import stat

import pytest
from servers import ServerProcess, free_port, unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.remoting.signature import Credentials

from .conftest import run_cli

TIMEOUT_S = 60


@pytest.fixture
def dev(tmp_path):
    port = free_port()
    server = ServerProcess(["dev", "--acl", "--namesrv-port", str(port), "--port", "0", "--metrics-port", "0",
                            "--store", str(tmp_path / "store")], tmp_path / "dev.log", "spark-mq dev: ")
    yield server, f"127.0.0.1:{port}"
    server.stop_cleanly()


def _account(tmp_path) -> dict[str, str]:
    """The user account ``credentials.env`` exports."""
    text = (tmp_path / "credentials.env").read_text()
    return dict(line.removeprefix("export ").split("=", 1) for line in text.splitlines())


def _secrets(tmp_path) -> list[str]:
    return re.findall(r"secretKey: (\S+)", (tmp_path / "plain_acl.yml").read_text())


def test_dev_acl_writes_private_accounts_and_the_cli_works_with_them(dev, tmp_path, monkeypatch):
    server, namesrv = dev
    for name in ("plain_acl.yml", "credentials.env"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    secrets = _secrets(tmp_path)
    assert len(secrets) == 2 and _account(tmp_path)["SPARK_MQ_SECRET_KEY"] in secrets
    account = _account(tmp_path)
    with SyncMQClientAPI(credentials=Credentials(account["SPARK_MQ_ACCESS_KEY"], account["SPARK_MQ_SECRET_KEY"])) \
            as api:  # the broker registered: signed by the admin account, which the NameServer's ACL wants
        wait_until(lambda: "broker-a" in api.get_cluster_info(namesrv).broker_addr_table, TIMEOUT_S,
                   "the dev broker registered")
    for key, value in account.items():
        monkeypatch.setenv(key, value)
    topic = unique("DevAcl")
    sent = run_cli("produce", "--topic", topic, input="hello\n", namesrv=namesrv)
    assert sent.returncode == 0, sent.stderr
    read = run_cli("consume", "--topic", topic, "--group", unique("dev_acl"), "--from", "first", "--max", "1",
                   "--json", namesrv=namesrv)
    assert read.returncode == 0 and '"body": "hello"' in read.stdout, read.stderr
    os.set_blocking(server.proc.stdout.fileno(), False)  # what it printed after its ready line, long since
    try:
        printed = server.ready_output + os.read(server.proc.stdout.fileno(), 1 << 16).decode()
    except BlockingIOError:  # read with the ready line already
        printed = server.ready_output
    shown = printed + server.log() + sent.stdout + sent.stderr + read.stdout + read.stderr
    assert "credentials.env" in shown and "ACL on" in shown
    assert not [s for s in secrets if s in shown], "a secret was printed or logged"


def test_dev_acl_refuses_a_client_without_the_account_in_one_line(dev, tmp_path, monkeypatch):
    """Needs the server-side ACL gate (branch acl-server): an unsigned or wrongly signed request is NO_PERMISSION."""
    _, namesrv = dev
    monkeypatch.delenv("SPARK_MQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("SPARK_MQ_SECRET_KEY", raising=False)
    unsigned = run_cli("produce", "--topic", unique("DevAcl"), input="hello\n", namesrv=namesrv)
    account = _account(tmp_path)
    wrong = run_cli("admin", "topic", "list", "--access-key", account["SPARK_MQ_ACCESS_KEY"], "--secret-key",
                    "not-the-secret", namesrv=namesrv)
    for refused in (unsigned, wrong):
        assert refused.returncode == 2 and "NO_PERMISSION" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert "sends no account" in unsigned.stderr and "--access-key" in unsigned.stderr
    assert "not-the-secret" not in wrong.stderr
    with SyncMQClientAPI() as api, pytest.raises(MQClientError, match="NO_PERMISSION"):
        api.get_all_topic_list(namesrv)
