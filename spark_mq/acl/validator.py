"""The check of one request against the rules (RocketMQ's ``PlainPermissionManager.validate``).

In RocketMQ's order, the first that applies decides:

1. the peer is a global white address: allowed, nothing else checked;
2. no ``AccessKey``: refused;
3. the AccessKey is no account: refused;
4. the account has a ``whiteRemoteAddress`` the peer does not match: refused;
5. the ``Signature`` is missing, oversized (refused without computing anything) or not the one the
   account's secret gives over the extFields and the body: refused;
6. an admin code from an account that is not admin: refused;
7. a permission the request needs on a topic or group (``resources.py``) that the account lacks: refused
   (its explicit topicPerms/groupPerms entry, else its default; DENY wins).

Where we differ from RocketMQ, each to be safer: RocketMQ lets a peer matching an account's
whiteRemoteAddress through with no signature and no permission check, and lets one that does not match
on to the signature check; here the address only restricts (step 4) and the signature and permissions
are always checked.

A refusal carries a reason (the metric label) and a remark for the NO_PERMISSION answer that names the
account, the request and what is missing, never the secret; text the client sent (an unknown AccessKey,
a topic) is shortened and stripped of control characters before it lands in a remark or a log line.

Thread-safety: pure functions over immutable rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.acl.plain_acl import Account, PlainAcl
from spark_mq.acl.resources import GROUP, Access, MalformedRequest, code_name, needs_of, rule_for
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import ACCESS_KEY, SIGNATURE, signature_matches

MAX_ACCESS_KEY = 256  # longer is no account's: refused before any lookup
MAX_SIGNATURE = 64  # a base64 HmacSHA1 is 28 characters: anything far longer is refused without an HMAC
MAX_SHOWN = 64  # characters of client-sent text in a remark or a log line

# refusal reasons: the values of the ``reason`` label of the refusal counter
NO_ACCESS_KEY = "no_access_key"
UNKNOWN_ACCOUNT = "unknown_account"
REMOTE_ADDRESS = "remote_address"
SIGNATURE_REASON = "signature"
ADMIN_REASON = "admin"
PERMISSION = "permission"
MALFORMED = "malformed"
CHECK_FAILED = "check_failed"  # a bug in the check: refused, and logged with its traceback
REASONS = (NO_ACCESS_KEY, UNKNOWN_ACCOUNT, REMOTE_ADDRESS, SIGNATURE_REASON, ADMIN_REASON, PERMISSION, MALFORMED,
           CHECK_FAILED)


@dataclass(frozen=True)
class Refusal:
    reason: str  # one of REASONS
    who: str  # the AccessKey as sent (shown form), "-" if none
    remark: str  # the NO_PERMISSION answer's remark


def check(acl: PlainAcl, cmd: RemotingCommand, peer_host: str) -> Refusal | None:
    """None if ``cmd`` from ``peer_host`` may be served, else why not (the texts are built only for a refusal)."""
    if is_global_white(acl, peer_host):
        return None
    access_key = cmd.ext_fields.get(ACCESS_KEY)
    if not access_key:
        return _refusal(NO_ACCESS_KEY, "-", "no AccessKey: this server checks ACL, sign requests with an account of "
                                            "its plain_acl.yml", cmd)
    account = acl.accounts.get(access_key) if len(access_key) <= MAX_ACCESS_KEY else None
    if account is None:
        who = shown(access_key)
        return _refusal(UNKNOWN_ACCOUNT, who, f"accessKey={who} is not an account of this server", cmd)
    if account.white_remote_address is not None and not account.white_remote_address.matches(peer_host):
        return _refusal(REMOTE_ADDRESS, access_key, f"accessKey={access_key} may not be used from {peer_host} (its "
                                                    f"whiteRemoteAddress)", cmd)
    problem = _signature_problem(account, cmd)
    if problem is not None:
        return _refusal(SIGNATURE_REASON, access_key, f"accessKey={access_key}: {problem}", cmd)
    rule = rule_for(cmd.code)
    if rule.access is Access.ADMIN:
        return None if account.admin else _refusal(ADMIN_REASON, access_key, f"accessKey={access_key} needs admin",
                                                   cmd)
    if rule.access is Access.ANY_ACCOUNT or account.has_every_resource:
        return None
    try:
        needs = needs_of(rule, cmd)
    except MalformedRequest as e:
        return _refusal(MALFORMED, access_key, f"accessKey={access_key}: cannot tell what the request needs: {e}", cmd)
    for need in needs:
        owned = account.group_perm(need.name) if need.kind == GROUP else account.topic_perm(need.name)
        if not need.perm.allows(owned):
            return _refusal(PERMISSION, access_key, f"accessKey={access_key} needs {need.perm.label} on {need.kind} "
                                                    f"{shown(need.name)}", cmd)
    return None


def _refusal(reason: str, who: str, text: str, cmd: RemotingCommand) -> Refusal:
    """A refusal whose remark is ``text`` and the request (an account's own key, from the file, is shown as is)."""
    return Refusal(reason, who, f"{text} (request {cmd.code} {code_name(cmd.code)})")


def is_global_white(acl: PlainAcl, peer_host: str) -> bool:
    """Whether ``peer_host`` is one of the global white addresses (its requests are not checked)."""
    return bool(acl.global_white) and any(p.matches(peer_host) for p in acl.global_white)


def _signature_problem(account: Account, cmd: RemotingCommand) -> str | None:
    given = cmd.ext_fields.get(SIGNATURE)
    if not given:
        return "no Signature"
    if len(given) > MAX_SIGNATURE:
        return f"a Signature of {len(given)} characters is not one"
    if not signature_matches(account.secret_key, cmd.ext_fields, cmd.body):
        return "the signature does not match (a wrong secretKey, or the request changed after it was signed)"
    return None


def shown(text: str) -> str:
    """Client-sent ``text`` fit for a remark or a log line: printable, at most :data:`MAX_SHOWN` characters."""
    clean = "".join(c if c.isprintable() and c not in " \"=" else "?" for c in text[:MAX_SHOWN])
    return clean if len(text) <= MAX_SHOWN else f"{clean}...({len(text)} characters)"
