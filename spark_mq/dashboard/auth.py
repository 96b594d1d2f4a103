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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_COOKIE = "spark_mq_console"
SESSION_IDLE_S = 8 * 3600.0  # a session unused this long is forgotten (its secret with it)
LOGIN_FAILURES_MAX = 5  # failed log-ins from one address within LOGIN_WINDOW_S; more are refused (HTTP 429)
LOGIN_WINDOW_S = 60.0


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
    """Logged-in accounts by session token (the cookie's value), forgotten after ``idle_s`` unused;
    ``on_forget(account)`` runs when the last session of an account ends (expiry or logout), so its
    connections can be closed."""

    def __init__(self, idle_s: float = SESSION_IDLE_S, clock: Callable[[], float] = time.monotonic,
                 on_forget: Callable[[Account], None] | None = None) -> None:
        self._idle_s = idle_s
        self._clock = clock
        self._on_forget = on_forget
        self._sessions: dict[str, tuple[Account, float]] = {}

    def open(self, account: Account) -> str:
        token = secrets.token_urlsafe(32)
        self._sessions[token] = (account, self._clock())
        return token

    def account(self, token: str | None) -> Account | None:
        """The account of ``token``, None when it names no live session."""
        now = self._clock()
        for stale in [t for t, (_, used) in self._sessions.items() if now - used > self._idle_s]:
            self.close(stale)
        if token is None or token not in self._sessions:
            return None
        account, _ = self._sessions[token]
        self._sessions[token] = (account, now)
        return account

    def close(self, token: str | None) -> None:
        found = self._sessions.pop(token or "", None)
        if found is None or self._on_forget is None:
            return
        if all(account != found[0] for account, _ in self._sessions.values()):
            self._on_forget(found[0])


class LoginLimiter:
    """At most ``max_failures`` failed log-ins per client address within ``window_s``: guessing secrets
    through the console is slowed to a few tries a minute."""

    def __init__(self, max_failures: int = LOGIN_FAILURES_MAX, window_s: float = LOGIN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_failures
        self._window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, addr: str) -> deque[float]:
        now = self._clock()
        failures = self._failures.get(addr, deque())
        while failures and now - failures[0] >= self._window_s:
            failures.popleft()
        if not failures:
            self._failures.pop(addr, None)
        return failures

    def wait_s(self, addr: str) -> float:
        """Seconds before ``addr`` may try again (0: it may now)."""
        failures = self._recent(addr)
        if len(failures) < self._max:
            return 0.0
        return max(failures[0] + self._window_s - self._clock(), 0.0)

    def failed(self, addr: str) -> None:
        self._failures[addr] = self._recent(addr)
        self._failures[addr].append(self._clock())
