"""What every page and action of the console shares: the console's state, the account of a request,
rendering, and turning failures into pages a person reads.

A handler wrapped by :func:`page` or :func:`action` gets a :class:`Visit` (the state, the account, the
account's :class:`Admin`). A server's ACL refusal of a visitor who has not logged in sends them to the
login page; of one who has, it is a page saying the account may not. An action (anything that changes
the cluster) needs an account the brokers take admin requests from, and a POST from the console's own
pages (its Origin), whatever the browser shows.

Thread-safety: the server's one event loop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from spark_mq.client.admin import Admin
from spark_mq.client.ids import is_spark_driver
from spark_mq.commands.common import format_ms
from spark_mq.common.errors import ClientError, ConfigError, MessageValidationError, SparkMQError
from spark_mq.dashboard.auth import ANONYMOUS, SESSION_COOKIE, Account, LoginLimiter, Sessions
from spark_mq.dashboard.clients import ClusterClients, refused
from spark_mq.dashboard.sampler import Sampler
from spark_mq.dashboard.topics import perm_text
from spark_mq.remoting.command import version_desc

log = logging.getLogger(__name__)

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
TEMPLATES.env.filters.update(time=format_ms, perm=perm_text, url=lambda s: quote(str(s), safe=""),
                             version=version_desc, spark_driver=is_spark_driver)


@dataclass
class ConsoleState:
    """The console's one state, on ``app.state.console``."""

    clients: ClusterClients
    sessions: Sessions
    sampler: Sampler
    controller_addrs: list[str]  # where to ask for the controller's view
    fixed_account: bool  # the sampler signs with an account given at start, not the last login's
    login_limiter: LoginLimiter
    archive_root: str = ""  # the tiered archive's root ("": the topic pages show archived offsets only)


@dataclass(frozen=True)
class Visit:
    request: Request
    state: ConsoleState
    account: Account
    admin: Admin

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        context.update(account=self.account, note=self.request.query_params.get("note"))
        return TEMPLATES.TemplateResponse(self.request, template, context, status_code=status)


def account_of(request: Request) -> Account | None:
    """The logged-in account of the request, None when it has none."""
    state: ConsoleState = request.app.state.console
    return state.sessions.account(request.cookies.get(SESSION_COOKIE))


def _visit(request: Request) -> Visit:
    state: ConsoleState = request.app.state.console
    account = account_of(request) or ANONYMOUS
    return Visit(request, state, account, state.clients.admin(account))


def redirect(path: str, note: str | None = None) -> RedirectResponse:
    sep = "&" if "?" in path else "?"
    return RedirectResponse(path + (f"{sep}note={quote(note)}" if note else ""), status_code=303)


def _failure(visit: Visit, e: SparkMQError) -> Response:
    if refused(e):
        if not visit.account.signed:
            return redirect(f"/login?next={quote(visit.request.url.path)}")
        return visit.render("error.html", 403, title="Not allowed",
                            message=f"The servers refused account {visit.account.access_key}: {e.remark or e}")
    if isinstance(e, (ClientError, ConfigError, MessageValidationError)):
        return visit.render("error.html", 400, title="Cannot do that", message=str(e))
    return visit.render("error.html", 502, title="The cluster did not answer", message=str(e))


Handler = Callable[[Visit], Awaitable[Response]]


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page: reads only."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        visit = _visit(request)
        try:
            return await handler(visit)
        except SparkMQError as e:
            return _failure(visit, e)

    return run


def _same_origin(request: Request) -> bool:
    """Whether a POST comes from the console's own pages (Origin, else Referer, names this host)."""
    source = request.headers.get("origin") or request.headers.get("referer") or ""
    return urlsplit(source).netloc == request.headers.get("host")


def action(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An action: changes the cluster. Refused to read-only accounts and to other sites' forms."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        visit = _visit(request)
        if not _same_origin(request):
            return visit.render("error.html", 403, title="Not allowed",
                                message="Changes are accepted from the console's own pages only.")
        if not visit.account.admin:
            log.info("console: read-only account %s refused %s", visit.account.access_key, request.url.path)
            return visit.render("error.html", 403, title="Not allowed",
                                message=f"Account {visit.account.access_key} is read-only: log in with an admin "
                                        f"account to change the cluster.")
        try:
            return await handler(visit)
        except SparkMQError as e:
            return _failure(visit, e)

    return run


async def form_of(visit: Visit) -> dict[str, str]:
    form = await visit.request.form()
    return {k: v.strip() for k, v in form.items() if isinstance(v, str)}


def confirmed(form: dict[str, str]) -> None:
    """Actions that destroy or move things carry ``confirm=yes``, set by the page once the operator agreed."""
    if form.get("confirm") != "yes":
        raise ClientError("this action needs a confirmation: use the console's button, and agree to it")
