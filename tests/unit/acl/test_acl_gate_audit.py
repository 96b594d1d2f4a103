"""The gate (acl/gate.py) and its audit (acl/audit.py) without a server: what a request gets back, the audit
lines and their levels, the rate limit that leaves the counters whole, and a fault in the check refusing."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from spark_mq.acl.acl_file import AclFile
from spark_mq.acl.audit import AclAudit
from spark_mq.acl.gate import AclGate
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import Credentials

ADMIN = Credentials("admin_key", "admin_secret")
ACL = f"""\
globalWhiteRemoteAddresses: [10.9.9.*]
accounts:
  - {{accessKey: {ADMIN.access_key}, secretKey: {ADMIN.secret_key}, admin: true}}
"""


def make_gate(tmp_path, counted: list[tuple[str, str]]) -> AclGate:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return AclGate(AclFile.open(path), AclAudit(lambda r: counted.append(("refused", r)),
                                                lambda c: counted.append(("admin", c))))


def conn(host: str = "127.0.0.1") -> SimpleNamespace:
    return SimpleNamespace(peer=f"{host}:40000", peer_host=host)


def signed(code: int, fields: dict[str, str]) -> RemotingCommand:
    cmd = RemotingCommand.request(code, fields)
    ADMIN.sign(cmd.ext_fields, cmd.body)
    return cmd


def audit_lines(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "spark_mq.audit"]


def test_admin_requests_are_audited_routine_ones_at_debug(tmp_path, caplog):
    counted: list[tuple[str, str]] = []
    gate = make_gate(tmp_path, counted)
    caplog.set_level(logging.DEBUG, logger="spark_mq.audit")
    assert gate(signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}), conn()) is None
    assert gate(signed(RequestCode.BROKER_HEARTBEAT, {"brokerName": "b"}), conn()) is None
    unsigned_delete = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"})
    assert gate(unsigned_delete, conn("10.9.9.3")) is None  # a global white address
    assert gate(signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}), conn()) is None  # not admin: no line
    assert audit_lines(caplog) == [
        (logging.INFO, "result=allowed reason=admin who=admin_key from=127.0.0.1:40000 "
                       "what=UPDATE_AND_CREATE_TOPIC(17) topic=T"),
        (logging.DEBUG, "result=allowed reason=admin who=admin_key from=127.0.0.1:40000 what=BROKER_HEARTBEAT(904) "
                        "broker=b"),
        (logging.INFO, "result=allowed reason=global_white who=- from=10.9.9.3:40000 "
                       "what=DELETE_TOPIC_IN_BROKER(215) topic=T"),
    ]
    assert counted == [("admin", "UPDATE_AND_CREATE_TOPIC"), ("admin", "BROKER_HEARTBEAT"),
                       ("admin", "DELETE_TOPIC_IN_BROKER")]


def test_refusals_answer_no_permission_and_the_log_is_limited_not_the_counters(tmp_path, caplog):
    counted: list[tuple[str, str]] = []
    gate = make_gate(tmp_path, counted)
    caplog.set_level(logging.INFO, logger="spark_mq.audit")
    for _ in range(10):
        answer = gate(RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}), conn())
        assert answer.code == ResponseCode.NO_PERMISSION and answer.remark.startswith("no AccessKey")
    assert counted == [("refused", "no_access_key")] * 10
    lines = audit_lines(caplog)
    assert len(lines) == 3 and lines[0] == (
        logging.WARNING, "result=refused reason=no_access_key who=- from=127.0.0.1:40000 what=PULL_MESSAGE(11) topic=T")
    assert gate(RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}), conn("127.0.0.2")) is not None
    assert len(audit_lines(caplog)) == 4  # another peer has its own window


def test_a_fault_in_the_check_refuses(tmp_path, caplog):
    counted: list[tuple[str, str]] = []
    gate = make_gate(tmp_path, counted)
    gate.acl_file.rules = None  # a bug: the check cannot run
    answer = gate(signed(RequestCode.SEND_MESSAGE, {"topic": "T"}), conn())
    assert answer.code == ResponseCode.NO_PERMISSION and "the ACL check failed (AttributeError)" in answer.remark
    assert counted == [("refused", "check_failed")]
    assert "ACL check of" in caplog.text and "Traceback" in caplog.text
