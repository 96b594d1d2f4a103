"""The audit trail of a server with aclEnable: one structured line per refused request and per admin request
that passes, on the logger ``spark_mq.audit`` (route it to its own file with the logging configuration).

A line is ``key=value`` pairs, values without spaces (client-sent text goes through ``validator.shown``)::

    result=refused reason=permission who=pub_account from=10.0.0.7:53122 what=PULL_MESSAGE(11) topic=T group=G
    result=allowed reason=admin who=admin_account from=10.0.0.9:40110 what=UPDATE_AND_CREATE_TOPIC(17) topic=T

Refused lines are rate-limited per (peer host, reason) like every other line a client can cause
(``LogLimiter``: a flood of bad requests writes a bounded log, the rest counted in a summary line).
Admin requests are written whole, at INFO; the routine ones peers send every few seconds (heartbeats to a
controller, a slave's metadata copies, data-version checks; ``Rule.routine``) at DEBUG. The optional
counters (a broker's Prometheus metrics) see every event, limited or not.

Thread-safety: one event loop (the server's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.acl.resources import code_name, rule_for
from spark_mq.acl.validator import Refusal, shown
from spark_mq.common.log_limit import LogLimiter
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import ACCESS_KEY

log = logging.getLogger("spark_mq.audit")

# extFields that name what a request touches, by the key the audit line gives them (first one present)
NAMED_FIELDS = {
    "topic": ("topic", "b"),
    "group": ("consumerGroup", "group", "producerGroup", "a"),
    "broker": ("brokerName",),
}

Counter = Callable[[str], None]


def no_count(_: str) -> None:
    """The counter of a server that exports no metrics."""


class AclAudit:
    """Writes the audit lines; ``on_refused(reason)`` and ``on_admin(code name)`` count every event."""

    def __init__(self, on_refused: Counter = no_count, on_admin: Counter = no_count) -> None:
        self._limited = LogLimiter(log)
        self._on_refused = on_refused
        self._on_admin = on_admin

    def refused(self, cmd: RemotingCommand, peer: str, peer_host: str, refusal: Refusal) -> None:
        self._on_refused(refusal.reason)
        self._limited.warning(peer_host, f"acl {refusal.reason}", "%s",
                              AuditLine("refused", refusal.reason, refusal.who, peer, cmd))

    def admin_allowed(self, cmd: RemotingCommand, peer: str, global_white: bool) -> None:
        """An admin request passed: for its account's ``admin: true``, or (``global_white``) for its address."""
        self._on_admin(code_name(cmd.code))
        level = logging.DEBUG if rule_for(cmd.code).routine else logging.INFO
        if log.isEnabledFor(level):
            who = cmd.ext_fields.get(ACCESS_KEY)
            log.log(level, "%s", AuditLine("allowed", "global_white" if global_white else "admin",
                                           "-" if global_white or not who else shown(who), peer, cmd))

    def flush(self) -> None:
        """Write the summaries of the rate-limit windows that ended (call it now and then)."""
        self._limited.flush()


class AuditLine:
    """One audit line, written out only when a handler formats it (a rate-limited flood builds no text)."""

    __slots__ = ("cmd", "peer", "reason", "result", "who")

    def __init__(self, result: str, reason: str, who: str, peer: str, cmd: RemotingCommand) -> None:
        self.result, self.reason, self.who, self.peer, self.cmd = result, reason, who, peer, cmd

    def __str__(self) -> str:
        cmd = self.cmd
        parts = [f"result={self.result}", f"reason={self.reason}", f"who={self.who}", f"from={self.peer}",
                 f"what={code_name(cmd.code)}({cmd.code})"]
        for key, fields in NAMED_FIELDS.items():
            value = next((cmd.ext_fields[f] for f in fields if cmd.ext_fields.get(f)), None)
            if value is not None:
                parts.append(f"{key}={shown(value)}")
        return " ".join(parts)
