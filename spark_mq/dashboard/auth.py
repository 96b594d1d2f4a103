"""Who is using the console: the ACL account an operator logged in with, kept server-side.

With ACL on the servers, every request the console makes is signed with the operator's account
(accessKey/secretKey). The secret lives only in this process, in a session the browser names by a
random cookie: it is never put in a page, a URL or a log line. An account that the brokers refuse an
admin request is read-only: the pages show it no buttons that change things, and the routes refuse
such actions too.

Thread-safety: used from the server's one event loop.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_COOKIE = "spark_mq_console"
SESSION_IDLE_S = 8 * 3600.0  # a session unused this long is forgotten (its secret with it)


@dataclass(frozen=True)
class Account:
    """An ACL account; ``admin``: the brokers accept its admin requests (create, delete, reset)."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool

    @property
    def signed(self) -> bool:
        return bool(self.access_key)


ANONYMOUS = Account("", "", admin=True)  # servers without ACL: nothing is signed, every action allowed


class Sessions:
    """Logged-in accounts by session token (the cookie's value), forgotten after ``idle_s`` unused."""

    def __init__(self, idle_s: float = SESSION_IDLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle_s = idle_s
        self._clock = clock
        self._sessions: dict[str, tuple[Account, float]] = {}

    def open(self, account: Account) -> str:
        token = secrets.token_urlsafe(32)
        self._sessions[token] = (account, self._clock())
        return token

    def account(self, token: str | None) -> Account | None:
        """The account of ``token``, None when it names no live session."""
        now = self._clock()
        for stale in [t for t, (_, used) in self._sessions.items() if now - used > self._idle_s]:
            del self._sessions[stale]
        if token is None or token not in self._sessions:
            return None
        account, _ = self._sessions[token]
        self._sessions[token] = (account, now)
        return account

    def close(self, token: str | None) -> None:
        self._sessions.pop(token or "", None)
