"""The permission matrix: every request code spark_mq knows, sent to a real broker, NameServer and controller
with aclEnable=true by each of {admin, publisher-only, subscriber-only, denied, unsigned}, answered NO_PERMISSION
exactly where the documented table (``acl/resources.py`` RULES, docs/security.md) says.

The requests name the module's topic and group in every field the table reads (and in the HEART_BEAT and
LOCK/UNLOCK bodies); the expectation is computed from the table's needs and this test's own model of what each
account owns (``_support.OWNED``), not by the server's check. A code a process does not serve is still gated:
refused when the account may not send it, REQUEST_CODE_NOT_SUPPORTED (never NO_PERMISSION) when it may.
"""

from __future__ import annotations

import pytest

from spark_mq.acl.plain_acl import Perm
from spark_mq.acl.resources import RULES, Access, BodyNeed, FieldNeed, Rule
from spark_mq.remoting.bodies import (
    BatchAck,
    BatchAckMessageRequestBody,
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    SubscriptionData,
)
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode

from ._support import ACCOUNTS, GROUP, OWNED, TOPIC, request

BODIES = {
    "heartbeat": HeartbeatData("acl-matrix-client", consumer_data_set=[
        ConsumerData(GROUP, subscription_data_set=[SubscriptionData(TOPIC)])]).to_json(),
    "lock": LockBatchRequestBody(GROUP, "acl-matrix-client", [MessageQueue(TOPIC, "broker-a", 0)]).to_json(),
    "batch ack": BatchAckMessageRequestBody("broker-a", [BatchAck(GROUP, TOPIC, False, 0, 0, 0, 1, 1, (0,))]).to_json(),
}
# what a body names, for the expectation: (kind, perm) per name it holds
BODY_NEEDS = {"heartbeat": [("group", Perm.SUB), ("topic", Perm.SUB)], "lock": [("group", Perm.SUB),
                                                                                 ("topic", Perm.SUB)],
              "batch ack": [("group", Perm.SUB), ("topic", Perm.SUB)]}


def fields_and_body(rule: Rule) -> tuple[dict[str, str], bytes]:
    fields = {"queueId": "0", "queueOffset": "0", "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0",
              "suspendTimeoutMillis": "0", "subVersion": "0"}
    body = b""
    for need in rule.needs:
        if isinstance(need, FieldNeed):
            fields[need.field] = TOPIC if need.kind == "topic" else GROUP
        else:
            body = BODIES[need.name]
    return fields, body


def owns(role: str, kind: str, perm: Perm) -> bool:
    name = TOPIC if kind == "topic" else GROUP
    held = OWNED[role][kind].get(name, set())
    return bool(held) if perm & Perm.ANY else perm.label in held


def expected_allowed(rule: Rule, role: str) -> bool:
    if role == "unsigned":
        return False
    if rule.access is Access.ADMIN:
        return role == "admin"
    if rule.access is Access.ANY_ACCOUNT or role == "admin":
        return True
    needs: list[tuple[str, Perm]] = []
    for need in rule.needs:
        needs.extend([(need.kind, need.perm)] if isinstance(need, FieldNeed) else BODY_NEEDS[need.name])
    return all(owns(role, kind, perm) for kind, perm in needs)


def test_the_model_covers_every_body_need():
    assert {n.name for rule in RULES.values() for n in rule.needs if isinstance(n, BodyNeed)} == set(BODIES)


@pytest.mark.parametrize("process", ["broker", "namesrv", "controller"])
def test_every_code_for_every_account(process, request_fixture_addr):
    addr = request_fixture_addr(process)
    wrong: list[str] = []
    counted = {"refused": 0, "served": 0}
    with SyncRemotingClient() as client:
        for code in RequestCode:
            rule = RULES[code]
            fields, body = fields_and_body(rule)
            for role, credentials in ACCOUNTS.items():
                answer = client.invoke(addr, request(code, fields, body, credentials), timeout=10)
                refused = answer.code == ResponseCode.NO_PERMISSION
                counted["refused" if refused else "served"] += 1
                if refused == expected_allowed(rule, role):
                    wrong.append(f"{code.name} by {role}: answered {answer.code} {answer.remark!r}, "
                                 f"expected {'a pass' if expected_allowed(rule, role) else 'NO_PERMISSION'} "
                                 f"({rule.describe()})")
                elif refused:
                    assert code.name in answer.remark and (credentials is None or
                                                           credentials.secret_key not in answer.remark)
    assert wrong == [], "\n".join(wrong)
    assert counted["refused"] > len(RequestCode) and counted["served"] > len(RequestCode)  # both sides exercised


@pytest.fixture
def request_fixture_addr(request):
    """``addr(process)``: the address of the module's ACL broker, NameServer or controller (started on demand)."""
    def addr(process: str) -> str:
        fixture = {"broker": "acl_broker", "namesrv": "acl_namesrv", "controller": "acl_controller"}[process]
        return request.getfixturevalue(fixture).addr
    return addr
