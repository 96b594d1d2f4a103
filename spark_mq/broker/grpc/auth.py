"""The ACL check of a gRPC call (RocketMQ proxy's ``AuthenticationPipeline`` for the plain ACL), against the same
accounts and permissions as remoting (``spark_mq/acl``).

A 5.x client signs every call with its ``Credentials(ak, sk)`` in the metadata:
``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature
being HmacSHA1(sk, value of ``x-mq-date-time``) in hex. The order of the checks is the remoting one
(``validator.check``): global white address, account, its whiteRemoteAddress, signature, then the permission each
topic or group of the call needs (a retry/DLQ topic is its group's).

Thread-safety: pure functions over the rules in force; called on the broker's event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence

from spark_mq.acl.gate import AclGate
from spark_mq.acl.plain_acl import Perm
from spark_mq.acl.resources import GROUP, Need, topic_need
from spark_mq.acl.validator import MAX_ACCESS_KEY, MAX_SIGNATURE, is_global_white, shown
from spark_mq.broker.grpc.status import status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.remoting.connection import client_faults

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SCHEME = "MQv2-HMAC-SHA1"
_FIELDS = re.compile(r"(\w+)=([^,\s]*)")

Metadata = Sequence[tuple[str, str | bytes]]


def topic(name: str, perm: Perm) -> Need:
    return topic_need(name, perm)


def group(name: str) -> Need:
    return Need(GROUP, name, Perm.SUB)


def refusal(gate: AclGate | None, metadata: Metadata, peer_host: str, needs: Iterable[Need]) -> pb.Status | None:
    """None when the call may be served (always without a gate: aclEnable off), else the status refusing it:
    UNAUTHORIZED for who the caller is, FORBIDDEN for a permission it lacks."""
    if gate is None:
        return None
    acl = gate.acl_file.rules
    if is_global_white(acl, peer_host):
        return None
    headers = {k: v if isinstance(v, str) else v.decode(errors="replace") for k, v in metadata}
    auth = headers.get(AUTHORIZATION, "")
    if not auth.startswith(SCHEME):
        return _refused(peer_host, "-", f"no {SCHEME} authorization: this broker checks ACL, give the client "
                                        f"Credentials(ak, sk) of an account of its plain_acl.yml")
    fields = dict(_FIELDS.findall(auth[len(SCHEME):]))
    access_key = fields.get("Credential", "")
    account = acl.accounts.get(access_key) if 0 < len(access_key) <= MAX_ACCESS_KEY else None
    if account is None:
        return _refused(peer_host, shown(access_key), f"accessKey={shown(access_key)} is not an account of this "
                                                      f"server")
    if account.white_remote_address is not None and not account.white_remote_address.matches(peer_host):
        return _refused(peer_host, access_key, f"accessKey={access_key} may not be used from {peer_host} (its "
                                               f"whiteRemoteAddress)")
    given = fields.get("Signature", "")
    expected = hmac.new(account.secret_key.encode(), headers.get(DATE_TIME, "").encode(), hashlib.sha1).hexdigest()
    if len(given) > MAX_SIGNATURE or not hmac.compare_digest(given.lower(), expected):
        return _refused(peer_host, access_key, f"accessKey={access_key}: the signature does not match (a wrong "
                                               f"secret key?)")
    if account.has_every_resource:
        return None
    for need in needs:
        owned = account.group_perm(need.name) if need.kind == GROUP else account.topic_perm(need.name)
        if not need.perm.allows(owned):
            return _refused(peer_host, access_key, f"accessKey={access_key} needs {need.perm.label} on {need.kind} "
                                                   f"{shown(need.name)}", pb.FORBIDDEN)
    return None


def _refused(peer_host: str, who: str, text: str, code: int = pb.UNAUTHORIZED) -> pb.Status:
    client_faults.warning(peer_host, "grpc acl", "gRPC call from %s refused (account %s): %s", peer_host, who, text)
    return status(code, text)
