"""The accounts file of a running server: a change applies without a restart; a broken version keeps the rules
in force and is logged once; a server with aclEnable=true and no valid file refuses to start, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from servers import Broker, wait_until

from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode

from ._support import GROUP, PLAIN_ACL, PUBLISHER, TOPIC, acl_conf, request, write_acl

RELOADED_WITHIN_S = 5.0  # polled every second; the margin is for a loaded machine


def test_a_changed_file_applies_and_a_broken_one_keeps_the_rules(tmp_path, plain_namesrv):
    acl_file = write_acl(tmp_path / "acl")
    broker = Broker(plain_namesrv, tmp_path / "broker", acl_conf(acl_file), verbose=False)
    pull = {"topic": TOPIC, "consumerGroup": GROUP, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 0,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}
    try:
        with SyncRemotingClient() as client:
            def answer() -> int:
                return client.invoke(broker.addr, request(RequestCode.PULL_MESSAGE, pull, credentials=PUBLISHER)).code

            assert answer() == ResponseCode.NO_PERMISSION  # the publisher may not read
            acl_file.write_text(PLAIN_ACL.replace(f"topicPerms: [{TOPIC}=PUB]",
                                                  f"topicPerms: [{TOPIC}=PUB|SUB]\n    groupPerms: [{GROUP}=SUB]"))
            wait_until(lambda: answer() != ResponseCode.NO_PERMISSION, RELOADED_WITHIN_S, "the new rules in force")

            acl_file.write_text(PLAIN_ACL + "  - {accessKey: broken\n")  # a syntax error
            errors = wait_until(lambda: [line for line in broker.log().splitlines() if '"level":"ERROR"' in line],
                                RELOADED_WITHIN_S, "the ERROR line of the broken file")
            assert str(acl_file) in errors[0] and "not valid YAML" in errors[0]
            assert "previous rules stay in force" in errors[0]
            assert answer() != ResponseCode.NO_PERMISSION  # the rules before the broken version

            acl_file.write_text(PLAIN_ACL)  # valid again: the publisher may not read any more
            wait_until(lambda: answer() == ResponseCode.NO_PERMISSION, RELOADED_WITHIN_S, "the fixed file in force")
            errors = [line for line in broker.log().splitlines() if '"level":"ERROR"' in line]
            assert len(errors) == 1, errors  # one line for the broken version, not one per poll
    finally:
        broker.stop()


def start_failure(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_mq.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("process", ["broker", "namesrv", "controller"])
def test_acl_on_without_a_valid_file_refuses_to_start(tmp_path, process):
    conf = tmp_path / f"{process}.conf"
    conf.write_text("aclEnable=true\n")  # plain_acl.yml beside it: missing
    extra = ["--store", str(tmp_path / "store")] if process != "namesrv" else []
    done = start_failure([process, "-c", str(conf), "--port", "0", *extra])
    assert done.returncode == 2, done
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"spark-mq: error: aclEnable=true but the ACL file {tmp_path / 'plain_acl.yml'} does not exist: "
                    "write the accounts there (conf/plain_acl.yml is an example) or point aclFile at it"), done.stderr

    (tmp_path / "plain_acl.yml").write_text("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n"
                                            "    defaultTopicPerm: READ\n")
    done = start_failure([process, "-c", str(conf), "--port", "0", *extra])
    assert done.returncode == 2, done
    last = done.stderr.strip().splitlines()[-1]
    assert "defaultTopicPerm 'READ' is not one of DENY, PUB, SUB" in last and "line 2" in last, done.stderr
    assert last.endswith("(fix the file, then start again)")
