"""The ACL check of a 5.x client's call: its MQv2-HMAC-SHA1 signature (as the official client computes it) against
the plain_acl.yml accounts, then the permissions the call needs; refusals say who or what is missing, never the
secret."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from spark_mq.acl.acl_file import AclFile
from spark_mq.acl.audit import AclAudit
from spark_mq.acl.gate import AclGate
from spark_mq.acl.plain_acl import Perm
from spark_mq.broker.grpc import auth
from spark_mq.broker.grpc.stubs import definition_pb2 as pb

ACL = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: publisherKey
    secretKey: publisherSecret
    topicPerms: [Orders=PUB]
"""
DATE = "20261127T184500Z"
PUBLISHER = ("publisherKey", "publisherSecret")


def signed(ak: str, sk: str, date: str = DATE) -> list[tuple[str, str]]:
    """The metadata rocketmq-python-client's Signature.metadata sends."""
    sign = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-date-time", date), ("x-mq-client-id", "c1"),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign}")]


@pytest.fixture
def gate(tmp_path: Path) -> AclGate:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return AclGate(AclFile.open(path), AclAudit())


def test_a_signed_call_with_the_permission_passes(gate):
    assert auth.refusal(gate, signed(*PUBLISHER), "127.0.0.1", [auth.topic("Orders", Perm.PUB)]) is None
    assert auth.refusal(None, [], "127.0.0.1", [auth.topic("Orders", Perm.PUB)]) is None  # aclEnable off


@pytest.mark.parametrize("metadata, code, says", [
    ([], pb.UNAUTHORIZED, "no MQv2-HMAC-SHA1 authorization"),
    (signed("nobodyKey", "publisherSecret"), pb.UNAUTHORIZED, "accessKey=nobodyKey is not an account"),
    (signed("publisherKey", "wrongSecret"), pb.UNAUTHORIZED, "signature does not match"),
    ([*signed("publisherKey", "publisherSecret")[1:], ("x-mq-date-time", "20260101T000000Z")], pb.UNAUTHORIZED,
     "signature does not match"),  # the date the signature is over was changed
])
def test_who_is_calling_is_checked(gate, metadata, code, says):
    refused = auth.refusal(gate, metadata, "127.0.0.1", [])
    assert refused is not None and refused.code == code and says in refused.message
    assert "publisherSecret" not in refused.message


def test_a_missing_permission_is_forbidden(gate):
    refused = auth.refusal(gate, signed(*PUBLISHER), "127.0.0.1", [auth.topic("Orders", Perm.SUB)])
    assert refused is not None and refused.code == pb.FORBIDDEN and "needs SUB on topic Orders" in refused.message
    group = auth.refusal(gate, signed(*PUBLISHER), "127.0.0.1", [auth.group("g1")])
    assert group is not None and group.code == pb.FORBIDDEN
