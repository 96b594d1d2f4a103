"""The check of one request (acl/validator.py) in RocketMQ's order, against a small plain_acl.yml; signatures
computed by hand with hmac; what each code needs (acl/resources.py), retry and DLQ topics included."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from spark_mq.acl.plain_acl import parse_plain_acl
from spark_mq.acl.resources import RULES, Access, rule_for
from spark_mq.acl.validator import check
from spark_mq.remoting.bodies import ConsumerData, HeartbeatData, LockBatchRequestBody, MessageQueue, SubscriptionData
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import Credentials

ACL = parse_plain_acl("""\
globalWhiteRemoteAddresses: [10.9.9.*]
accounts:
  - {accessKey: admin_key, secretKey: admin_secret, admin: true}
  - accessKey: pub_key
    secretKey: pub_secret
    topicPerms: [T=PUB]
  - accessKey: sub_key
    secretKey: sub_secret
    defaultTopicPerm: SUB
    topicPerms: [Hidden=DENY]
    groupPerms: [G=SUB]
  - {accessKey: lan_key, secretKey: lan_secret, whiteRemoteAddress: 192.168.1.*, defaultTopicPerm: PUB}
""", "test.yml")
PEER = "127.0.0.1"


def signed(code: int, fields: dict[str, str], key: str, secret: str, body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand.request(code, fields, body)
    Credentials(key, secret).sign(cmd.ext_fields, cmd.body)
    return cmd


def pull(key: str, secret: str, topic: str = "T", group: str = "G") -> RemotingCommand:
    return signed(RequestCode.PULL_MESSAGE, {"topic": topic, "consumerGroup": group, "queueId": "0"}, key, secret)


def test_a_signature_computed_by_hand_passes():
    fields = {"topic": "T", "queueId": "0", "AccessKey": "pub_key"}
    body = b"hello"
    content = "".join(fields[k] for k in sorted(fields)).encode() + body  # AccessKey, queueId, topic values, body
    assert content == b"pub_key0Thello"
    fields["Signature"] = base64.b64encode(hmac.new(b"pub_secret", content, hashlib.sha1).digest()).decode()
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)
    assert check(ACL, cmd, PEER) is None
    cmd.body = b"hellO"
    assert check(ACL, cmd, PEER).reason == "signature"


def test_checks_run_in_rocketmqs_order():
    unsigned = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})
    assert check(ACL, unsigned, "10.9.9.4") is None  # a global white address: nothing checked
    assert check(ACL, unsigned, PEER).reason == "no_access_key"
    assert check(ACL, signed(11, {}, "nobody_key", "whatever"), PEER).reason == "unknown_account"
    lan = signed(RequestCode.SEND_MESSAGE, {"topic": "X"}, "lan_key", "lan_secret")
    assert check(ACL, lan, "192.168.1.7") is None
    assert check(ACL, lan, "192.168.2.7").reason == "remote_address"  # set and not matching: refused
    assert check(ACL, pull("sub_key", "pub_secret"), PEER).reason == "signature"
    assert check(ACL, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, "pub_key", "pub_secret"),
                 PEER).reason == "admin"
    assert check(ACL, pull("pub_key", "pub_secret"), PEER).reason == "permission"
    assert check(ACL, pull("sub_key", "sub_secret"), PEER) is None
    assert check(ACL, pull("admin_key", "admin_secret", "Any", "Other"), PEER) is None


def test_a_matching_white_address_still_needs_the_signature():
    """Unlike RocketMQ, whose matching whiteRemoteAddress skips the signature and the permissions."""
    forged = signed(RequestCode.SEND_MESSAGE, {"topic": "X"}, "lan_key", "not_the_secret")
    assert check(ACL, forged, "192.168.1.7").reason == "signature"


def test_the_remark_names_account_request_and_permission_never_the_secret():
    refusal = check(ACL, pull("pub_key", "pub_secret"), PEER)
    assert refusal.remark == "accessKey=pub_key needs SUB on topic T (request 11 PULL_MESSAGE)"
    refusal = check(ACL, pull("sub_key", "sub_secret", group="H"), PEER)
    assert refusal.remark == "accessKey=sub_key needs SUB on group H (request 11 PULL_MESSAGE)"
    refusal = check(ACL, signed(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, "sub_key", "sub_secret"), PEER)
    assert refusal.remark == "accessKey=sub_key needs admin (request 215 DELETE_TOPIC_IN_BROKER)"
    wrong = check(ACL, pull("sub_key", "a_wrong_secret"), PEER)
    assert "sub_secret" not in wrong.remark and "a_wrong_secret" not in wrong.remark
    assert wrong.remark.startswith("accessKey=sub_key: the signature does not match")


def test_explicit_perm_wins_over_default_and_deny_wins():
    assert check(ACL, pull("sub_key", "sub_secret", "Anything"), PEER) is None  # defaultTopicPerm SUB
    assert check(ACL, pull("sub_key", "sub_secret", "Hidden"), PEER).reason == "permission"


@pytest.mark.parametrize("prefix", ["%RETRY%", "%DLQ%"])
def test_retry_and_dlq_topics_are_their_groups(prefix):
    assert check(ACL, pull("sub_key", "sub_secret", f"{prefix}G"), PEER) is None  # G=SUB, no topic perm needed
    refusal = check(ACL, pull("sub_key", "sub_secret", f"{prefix}H", "G"), PEER)
    assert refusal.remark == "accessKey=sub_key needs SUB on group H (request 11 PULL_MESSAGE)"
    send = signed(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": f"{prefix}G"}, "sub_key", "sub_secret")
    assert check(ACL, send, PEER) is None  # a consumer's send-back to its own retry topic: SUB on the group


def test_oversized_fields_are_refused_without_computing():
    cmd = pull("sub_key", "sub_secret")
    cmd.ext_fields["Signature"] = "A" * (1 << 20)
    refusal = check(ACL, cmd, PEER)
    assert refusal.reason == "signature" and "a Signature of 1048576 characters is not one" in refusal.remark
    assert len(refusal.remark) < 200
    cmd.ext_fields["AccessKey"] = "k" * (1 << 20)
    refusal = check(ACL, cmd, PEER)
    assert refusal.reason == "unknown_account" and "(1048576 characters)" in refusal.remark
    assert len(refusal.remark) < 200


def test_client_text_is_shown_safely():
    cmd = signed(RequestCode.PULL_MESSAGE, {"topic": "T\nfake=line", "consumerGroup": "G"}, "sub_key", "sub_secret")
    cmd.ext_fields["AccessKey"] = "evil key\nresult=allowed"
    assert check(ACL, cmd, PEER).remark.startswith("accessKey=evil?key?result?allowed is not an account")


def test_body_needs_heartbeat_and_lock():
    beat = HeartbeatData("c1", consumer_data_set=[ConsumerData("G", subscription_data_set=[
        SubscriptionData("T"), SubscriptionData("%RETRY%G")])]).to_json()
    assert check(ACL, signed(RequestCode.HEART_BEAT, {}, "sub_key", "sub_secret", beat), PEER) is None
    refusal = check(ACL, signed(RequestCode.HEART_BEAT, {}, "pub_key", "pub_secret", beat), PEER)
    assert refusal.remark == "accessKey=pub_key needs SUB on group G (request 34 HEART_BEAT)"
    producer_only = HeartbeatData("c1").to_json()
    assert check(ACL, signed(RequestCode.HEART_BEAT, {}, "pub_key", "pub_secret", producer_only), PEER) is None
    lock = LockBatchRequestBody("G", "c1", [MessageQueue("Hidden", "b", 0)]).to_json()
    refusal = check(ACL, signed(RequestCode.LOCK_BATCH_MQ, {}, "sub_key", "sub_secret", lock), PEER)
    assert refusal.remark == "accessKey=sub_key needs SUB on topic Hidden (request 41 LOCK_BATCH_MQ)"
    garbage = check(ACL, signed(RequestCode.HEART_BEAT, {}, "sub_key", "sub_secret", b"{not json"), PEER)
    assert garbage.reason == "malformed"


def test_a_missing_name_is_malformed_an_optional_one_is_not():
    refusal = check(ACL, signed(RequestCode.PULL_MESSAGE, {"topic": "T"}, "sub_key", "sub_secret"), PEER)
    assert refusal.reason == "malformed" and "no group in `consumerGroup`" in refusal.remark
    assert check(ACL, signed(RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": ""}, "pub_key",
                             "pub_secret"), PEER) is None


def test_every_code_has_a_rule_and_unknown_codes_need_admin():
    assert [c.name for c in RequestCode if c not in RULES] == []
    assert rule_for(4242).access is Access.ADMIN
    assert check(ACL, signed(4242, {}, "sub_key", "sub_secret"), PEER).reason == "admin"
    assert check(ACL, signed(4242, {}, "admin_key", "admin_secret"), PEER) is None
