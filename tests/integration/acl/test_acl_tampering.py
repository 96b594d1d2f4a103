"""Tampered, replayed and malformed signatures against a real broker with aclEnable=true: every one is refused
NO_PERMISSION without the secret in the answer or the log, the broker keeps serving; the refusals and admin
requests leave audit lines (rate-limited per peer) and Prometheus counters."""

from __future__ import annotations

import dataclasses
import urllib.request

from broker._support import send_header
from prometheus_client.parser import text_string_to_metric_families
from servers import unique, wait_until

from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import SIGNATURE, Credentials

from ._support import ADMIN, PUBLISHER, TOPIC, request

WRONG = Credentials(PUBLISHER.access_key, "a_wrong_secret_value")


def acl_counters(url: str) -> dict[tuple[str, str], float]:
    """The ACL's counters: (metric, label value) -> value."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, next(iter(s.labels.values()))): s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name.startswith("spark_mq_acl_")}


def resend(cmd: RemotingCommand, **changes: object) -> RemotingCommand:
    """A copy of a captured request (its own opaque), with ``changes``."""
    return dataclasses.replace(cmd, opaque=RemotingCommand(0).opaque, ext_fields=dict(cmd.ext_fields), **changes)


def test_tampered_requests_are_refused_and_the_broker_keeps_serving(acl_broker):
    fields = send_header(TOPIC, 0).to_ext_fields()
    captured = request(RequestCode.SEND_MESSAGE, fields, b"signed body", PUBLISHER)
    with SyncRemotingClient() as client:
        def send(cmd: RemotingCommand) -> RemotingCommand:
            return client.invoke(acl_broker.addr, cmd)

        assert send(captured).code == ResponseCode.SUCCESS
        assert send(resend(captured)).code == ResponseCode.SUCCESS  # an exact replay: RocketMQ's signature has no nonce

        body_changed = resend(captured, body=b"signed bodY")
        field_changed = resend(captured)
        field_changed.ext_fields["queueId"] = "1"
        flipped = resend(captured)
        sig = flipped.ext_fields[SIGNATURE]
        flipped.ext_fields[SIGNATURE] = ("B" if sig[0] != "B" else "C") + sig[1:]
        oversized = resend(captured)
        oversized.ext_fields[SIGNATURE] = "A" * (1 << 20)
        missing = resend(captured)
        del missing.ext_fields[SIGNATURE]
        wrong_secret = request(RequestCode.SEND_MESSAGE, fields, b"signed body", WRONG)
        for name, cmd in {"modified body": body_changed, "modified extField": field_changed,
                          "modified signature": flipped, "1 MB signature": oversized, "no signature": missing,
                          "wrong secret": wrong_secret}.items():
            answer = send(cmd)
            assert answer.code == ResponseCode.NO_PERMISSION, (name, answer)
            assert answer.remark.startswith(f"accessKey={PUBLISHER.access_key}: "), (name, answer.remark)
            assert "SEND_MESSAGE" in answer.remark and len(answer.remark) < 300, (name, answer.remark)
            assert PUBLISHER.secret_key not in answer.remark and WRONG.secret_key not in answer.remark

        assert send(request(RequestCode.SEND_MESSAGE, fields, b"after", PUBLISHER)).code == ResponseCode.SUCCESS
        offset = send(request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0}, credentials=ADMIN))
        assert offset.ext_fields["offset"] == "3"  # the two sends and the replay, nothing refused
    assert acl_broker.server.alive()
    log = acl_broker.log()
    assert PUBLISHER.secret_key not in log and WRONG.secret_key not in log


def test_refusals_and_admin_requests_are_audited_and_counted(acl_broker):
    before = acl_counters(acl_broker.metrics_url)
    topic = unique("AclAudit")
    with SyncRemotingClient() as client:
        for _ in range(20):
            answer = client.invoke(acl_broker.addr, request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}))
            assert answer.code == ResponseCode.NO_PERMISSION
        created = client.invoke(acl_broker.addr, request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": 1,
                                                  "writeQueueNums": 1, "perm": 6}, credentials=ADMIN))
        assert created.code == ResponseCode.SUCCESS
        refused = client.invoke(acl_broker.addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic},
                                                         credentials=PUBLISHER))
        assert refused.code == ResponseCode.NO_PERMISSION

    after = acl_counters(acl_broker.metrics_url)

    def grew(metric: str, label: str) -> float:
        return after.get((metric, label), 0) - before.get((metric, label), 0)

    assert grew("spark_mq_acl_refusals_total", "no_access_key") == 20  # every refusal counted, limited or not
    assert grew("spark_mq_acl_refusals_total", "admin") == 1
    assert grew("spark_mq_acl_admin_requests_total", "UPDATE_AND_CREATE_TOPIC") == 1

    lines = wait_until(lambda: [line for line in acl_broker.log().splitlines() if "spark_mq.audit" in line
                                and topic in line and "UPDATE_AND_CREATE_TOPIC" in line], what="the audit line")
    assert f"result=allowed reason=admin who={ADMIN.access_key} from=127.0.0.1:" in lines[0]
    assert f"what=UPDATE_AND_CREATE_TOPIC(17) topic={topic}" in lines[0]
    log = acl_broker.log().splitlines()
    unsigned = [line for line in log if "result=refused reason=no_access_key who=-" in line and topic in line]
    assert 1 <= len(unsigned) <= 3, unsigned  # rate-limited per peer: 3 lines per 10 s window, the rest summarised
    assert "what=GET_MAX_OFFSET(30)" in unsigned[0]
    assert any(f"result=refused reason=admin who={PUBLISHER.access_key}" in line and topic in line for line in log)
