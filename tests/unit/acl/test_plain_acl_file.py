"""plain_acl.yml parsed (acl/plain_acl.py) and reloaded (acl/acl_file.py): RocketMQ's example file, every key,
permissions, the errors that name the line and the account, and a reload that keeps the old rules when the new
file is wrong."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from spark_mq.acl.acl_file import AclFile
from spark_mq.acl.plain_acl import Perm, parse_plain_acl
from spark_mq.common.errors import ConfigError

ROCKETMQ_EXAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmqs_own_example_file():
    acl = parse_plain_acl(ROCKETMQ_EXAMPLE, "plain_acl.yml")
    assert [p.text for p in acl.global_white] == ["10.10.103.*", "192.168.0.*"]
    first, second = acl.accounts["RocketMQ"], acl.accounts["rocketmq2"]
    assert first.secret_key == "12345678" and not first.admin and first.white_remote_address is None
    assert (first.topic_perm("topicA"), first.topic_perm("topicB"), first.topic_perm("topicC")) == (
        Perm.DENY, Perm.PUB | Perm.SUB, Perm.SUB)
    assert first.topic_perm("other") == Perm.DENY and first.group_perm("other") == Perm.SUB
    assert first.group_perm("groupA") == Perm.DENY and first.group_perm("groupB") == Perm.PUB | Perm.SUB
    assert second.admin and second.has_every_resource and second.white_remote_address.matches("192.168.1.20")
    assert second.default_topic_perm == Perm.DENY  # absent: DENY, as RocketMQ's parsePermFromString(null)


def test_scalars_stay_text_and_secrets_stay_out_of_reprs():
    acl = parse_plain_acl("accounts:\n  - {accessKey: 0123456, secretKey: 0777777777, admin: True}\n", "f.yml")
    account = acl.accounts["0123456"]  # YAML 1.1 would read 0777777777 as an octal number
    assert account.secret_key == "0777777777" and account.admin
    assert "0777777777" not in repr(account) and "0777777777" not in repr(acl)


@pytest.mark.parametrize(("need", "owned", "allowed"), [
    (Perm.PUB, Perm.PUB, True), (Perm.PUB, Perm.SUB, False), (Perm.SUB, Perm.PUB | Perm.SUB, True),
    (Perm.ANY, Perm.SUB, True), (Perm.ANY, Perm.PUB, True), (Perm.ANY, Perm.DENY, False),
    (Perm.SUB, Perm.DENY | Perm.SUB, False),  # DENY wins
])
def test_permission_bits(need, owned, allowed):
    assert need.allows(owned) is allowed


@pytest.mark.parametrize(("text", "said"), [
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    defaultTopicPerm: READ\n",
     "f.yml: line 2, accounts[0] (accessKey 'abcdefg'): defaultTopicPerm 'READ' is not one of DENY, PUB, SUB"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    topicPerms: [T=PUBLISH]\n",
     "line 2, accounts[0] (accessKey 'abcdefg'): topicPerms entry 'T=PUBLISH': 'PUBLISH' is not one of"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    groupPerms: [G]\n",
     "groupPerms entry 'G' is not NAME=PERM"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    topicPerm: [T=PUB]\n",
     "unknown key 'topicPerm': did you mean 'topicPerms'?"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    whiteRemoteAddress: 10.0.0.300\n",
     "(accessKey 'abcdefg'): whiteRemoteAddress '10.0.0.300': '10.0.0.300' is not an IPv4 or IPv6 address"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n    admin: maybe\n", "admin must be true or false"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: short\n", "secretKey must be at least 7 characters"),
    ("accounts:\n  - accessKey: abcdefg\n", "(accessKey 'abcdefg'): secretKey is missing or empty"),
    ("accounts:\n  - {accessKey: 'who=admin', secretKey: abcdefgh}\n", "accessKey may not hold spaces, quotes or '='"),
    ("accounts:\n  - {accessKey: abcdefg, secretKey: abcdefgh}\n  - {accessKey: abcdefg, secretKey: 12345678}\n",
     "line 3, accounts[1]: accessKey 'abcdefg' is given twice"),
    ("globalWhiteRemoteAddresses: [10.0.*]\n", "globalWhiteRemoteAddresses[0]: '10.0.*': an IPv4 pattern has 4"),
    ("acounts: []\n", "unknown key 'acounts': did you mean 'accounts'?"),
    ("accounts:\n  - accessKey: [x\n", "f.yml: not valid YAML: line 3, column 1"),
    ("accounts: yes\n", "accounts must be a list of accounts"),
    ("- just a list\n", "expected a mapping with globalWhiteRemoteAddresses and accounts"),
])
def test_a_mistake_is_named_with_file_line_and_account(text, said):
    with pytest.raises(ConfigError) as e:
        parse_plain_acl(text, "f.yml")
    assert said in str(e.value)


def test_an_empty_file_has_no_accounts():
    assert parse_plain_acl("", "f.yml").accounts == {}


ONE = "accounts:\n  - {accessKey: account1, secretKey: secret11, admin: true}\n"
TWO = ONE + "  - {accessKey: account2, secretKey: secret22}\n"


def _rewrite(path: Path, text: str) -> None:
    """Write ``text`` with an mtime that differs from the last one even on a coarse clock."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 10_000_000, before + 10_000_000))


def test_reload_takes_a_good_change_and_keeps_the_old_rules_on_a_bad_one(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ONE)
    acl_file = AclFile.open(path)
    assert list(acl_file.rules.accounts) == ["account1"]
    assert acl_file.reload() is False  # unchanged

    _rewrite(path, TWO)
    assert acl_file.reload() is True
    assert list(acl_file.rules.accounts) == ["account1", "account2"]

    caplog.set_level(logging.INFO, logger="spark_mq.acl")
    _rewrite(path, TWO + "  - {accessKey: account3\n")  # a syntax error
    assert acl_file.reload() is False and acl_file.reload() is False
    assert list(acl_file.rules.accounts) == ["account1", "account2"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors  # one line per bad version, not one per poll
    assert str(path) in errors[0].getMessage() and "not valid YAML" in errors[0].getMessage()
    assert "previous rules stay in force" in errors[0].getMessage()

    _rewrite(path, ONE)
    assert acl_file.reload() is True and list(acl_file.rules.accounts) == ["account1"]


def test_a_deleted_file_keeps_the_rules_and_a_touched_one_reloads_nothing(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ONE)
    acl_file = AclFile.open(path)
    rules = acl_file.rules
    _rewrite(path, ONE)  # same bytes, new mtime
    assert acl_file.reload() is False and acl_file.rules is rules
    path.unlink()
    caplog.set_level(logging.ERROR, logger="spark_mq.acl")
    assert acl_file.reload() is False and acl_file.rules is rules
    assert "cannot read it" in caplog.text
    path.write_text(TWO)
    assert acl_file.reload() is True and "account2" in acl_file.rules.accounts


def test_a_missing_or_invalid_file_at_start_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match=r"aclEnable=true but the ACL file .*missing.yml does not exist: write the "
                                          r"accounts there \(conf/plain_acl.yml is an example\) or point aclFile"):
        AclFile.open(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts: [\n")
    with pytest.raises(ConfigError, match=r"aclEnable=true but .*bad.yml: not valid YAML.*fix the file, then start"):
        AclFile.open(bad)


def test_the_shipped_example_parses():
    example = Path(__file__).resolve().parents[3] / "conf" / "plain_acl.yml"
    acl = AclFile.open(example).rules
    assert acl.global_white == () and acl.accounts["example-admin-key"].has_every_resource
    assert acl.accounts["example-producer-key"].white_remote_address.text == "192.168.0.*"
