"""The ACL gate of a server (broker, NameServer, controller) with aclEnable: every request is checked
(``validator.check``) before the server looks for its handler, so an unknown code is refused too.

The gate is the ``RemotingServer``'s optional ``gate``: ``gate(cmd, conn)`` returns None to let the
request through, or the NO_PERMISSION answer. It writes the audit (``audit.py``) and, run as a task
(``run``), reloads the plain_acl.yml when it changes and writes the audit's held-back summaries.

Thread-safety: one event loop (the server's).
"""

from __future__ import annotations

import logging
from pathlib import Path

from spark_mq.acl.acl_file import AclFile
from spark_mq.acl.audit import AclAudit, Counter, no_count
from spark_mq.acl.resources import Access, rule_for
from spark_mq.acl.validator import CHECK_FAILED, Refusal, check, is_global_white
from spark_mq.common.config import SecurityConfig
from spark_mq.common.errors import ConfigError
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection, client_faults
from spark_mq.remoting.loop import every

RELOAD_INTERVAL_S = 1.0  # how often the file is looked at (a changed one applies within about this long)


class AclGate:
    """Checks every request against ``acl_file``'s rules in force; writes the audit."""

    def __init__(self, acl_file: AclFile, audit: AclAudit) -> None:
        self.acl_file = acl_file
        self.audit = audit

    @classmethod
    def of(cls, config: SecurityConfig, on_refused: Counter = no_count, on_admin: Counter = no_count) -> AclGate | None:
        """The gate ``config`` asks for (None with aclEnable off); ``ConfigError`` saying what to do when the
        file is missing or invalid: a server with aclEnable never serves without rules."""
        if not config.acl_enable:
            return None
        if not config.acl_file:
            raise ConfigError("aclEnable=true needs the accounts file: set aclFile (or start with a config file, "
                              "beside which plain_acl.yml is read)")
        return cls(AclFile.open(Path(config.acl_file)), AclAudit(on_refused, on_admin))

    def __call__(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        rules = self.acl_file.rules
        try:
            refusal = check(rules, cmd, conn.peer_host)
        except Exception as e:  # a bug here must refuse, never let the request through or kill the connection
            client_faults.log(logging.ERROR, conn.peer_host, "acl check failed", "ACL check of %s from %s failed",
                              cmd.describe(), conn.peer, exc_info=True)
            refusal = Refusal(CHECK_FAILED, "-", f"the ACL check failed ({type(e).__name__}): see the server's log")
        if refusal is None:
            if rule_for(cmd.code).access is Access.ADMIN:
                self.audit.admin_allowed(cmd, conn.peer, is_global_white(rules, conn.peer_host))
            return None
        self.audit.refused(cmd, conn.peer, conn.peer_host, refusal)
        return cmd.make_response(ResponseCode.NO_PERMISSION, refusal.remark)

    async def run(self) -> None:
        """Until cancelled, every :data:`RELOAD_INTERVAL_S`: reload a changed file, write held-back audit summaries."""
        await every(RELOAD_INTERVAL_S, self._tick, f"ACL reload of {self.acl_file.path}")

    def _tick(self) -> None:
        self.acl_file.reload()
        self.audit.flush()
